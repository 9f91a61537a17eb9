"""The upgrade tells who wrote a result that names no worker from its outcome
(`throughput_schema.upgrade_results`): each of today's writers' outcomes, made by the
writer's own code, is told as that writer's."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import msgspec
import pytest
import torch

from throughput_schema import Recipe
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.outcomes import CudaOom
from throughput_schema.upgrade_results import with_worker, written_by
from throughput_sweep.node.watchdog import Watchdog, WorkerSpec
from throughput_sweep.node.worker_exit import outcome_for_exit
from throughput_sweep.schedulers.base import JobStatus
from throughput_sweep.submission import outcome_of
from tiny_llm.fp8 import Fp8Unavailable
from tiny_llm.protocol import NonFiniteState
from tiny_llm.worker import classify

RECIPE = Recipe(
    name="x",
    model={"n_layers": 1, "d_model": 64, "n_heads": 1, "ffn_dim": 128, "context_length": 64},  # type: ignore[arg-type]
    training={"micro_batch_size": 1, "batch_tokens": 64},  # type: ignore[arg-type]
)


def _told(outcome) -> str:
    return written_by(msgspec.to_builtins(outcome))


@pytest.mark.parametrize("phase", ["setup", "compile", "capture", "warmup", "measurement"])
def test_the_workers_own_outcomes_are_the_workers(phase):
    errors = [
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        NonFiniteState(phase, 3),
        RuntimeError("boom"),
        Fp8Unavailable("no torchao", "install torchao"),
    ]
    outcomes = [classify(exc, phase) for exc in errors]
    assert [o.__struct_config__.tag for o in outcomes] == ["cuda_oom", "nonfinite", "crashed", "refused"]
    assert [_told(o) for o in outcomes] == ["worker"] * 4


def test_the_watchdogs_outcomes_are_the_watchdogs(tmp_path):
    specs = [
        WorkerSpec(argv=[str(tmp_path / "missing")], result=tmp_path / "r.json", label=label)
        for label in ("", "baseline", "instrumented")
    ]
    stops = []
    for spec in specs:
        dog = Watchdog([spec], recipe=RECIPE, deadline_seconds=60, time_limit_seconds=120)
        stops.append(dog._stop_outcome(signal.SIGTERM))  # a scancel: cancelled
        dog.started = time.monotonic() - 200
        stops.append(dog._stop_outcome(signal.SIGTERM))  # at the time limit: timeout
        stops.append(dog.run_one(spec, {})[1])  # cannot start the worker
        dog.deadline_seconds = 0
        stops.append(dog.run_one(spec, {})[1])  # the deadline passed first
    exits = [outcome_for_exit(code) for code in (-signal.SIGKILL, -signal.SIGSEGV, 10, 0, 1)]
    carried = msgspec.structs.replace(CudaOom(phase="compile"), message="baseline worker: CUDA out of memory")
    kinds = {o.__struct_config__.tag for o in stops + exits}
    assert kinds == {"cancelled", "timeout", "crashed", "host_oom", "storage_full"}
    assert {_told(o) for o in [*stops, *exits, carried]} == {"watchdog"}


@pytest.mark.parametrize(
    "state", ["completed", "failed", "timeout", "cancelled", "node_fail", "out_of_memory", "preempted"]
)
def test_the_controllers_outcomes_are_the_controllers(state):
    acc = JobAccounting(job_id="7", state=state, exit_code=10 if state == "failed" else 1)  # type: ignore[arg-type]
    for launch in (None, "no output"):
        outcome = outcome_of(JobStatus("7", state, said=state.upper(), accounting=acc), 60.0, launch)
        assert _told(outcome) == "controller", outcome


def test_an_outcome_no_writer_alone_writes_is_told_as_the_upgrades(tmp_path: Path):
    result: dict = {"outcome": {"kind": "timeout", "phase": "measure"}}
    assert with_worker(result, "tiny_llm") and result["worker"] == {
        "module": "tiny_llm",
        "version": "",
        "written_by": "upgrade",
    }
    assert not with_worker(result, "other")  # a result that names its worker keeps it
