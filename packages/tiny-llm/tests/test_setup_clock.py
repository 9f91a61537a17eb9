"""The setup's split into phases: compiled on the CPU, the trace and the backend's compile
are their own phases, and the phases add up to the setup the worker records."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from throughput_schema import WorkerResult, read
from throughput_schema.recipe import load_recipe
from throughput_schema.results import SETUP_PHASES
from tiny_llm.cli import main
from tiny_llm.setup_clock import SetupClock, startup_seconds
from tiny_llm.update import build

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"


@pytest.mark.slow  # inductor compiles the tiny model's forward and backward on the CPU
def test_a_compiled_setup_splits_into_trace_compile_and_first_run():
    recipe = load_recipe(TINY, ["model.vocab_size=512"])
    clock = SetupClock()
    torch._dynamo.reset()  # a cold compile, whatever ran before in this process
    start = time.perf_counter()
    build(recipe, torch.device("cpu"), compile_model=True, on_phase=clock.mark)
    end = time.perf_counter()
    phases = clock.phases(start, end)
    assert list(phases) == list(SETUP_PHASES)
    assert sum(phases.values()) == pytest.approx(end - start, rel=1e-9)
    # Dynamo's own timers saw a trace and an inductor compile; without a graph there is no capture.
    assert phases["trace"] > 0 and phases["compile"] > 0 and phases["capture"] == 0
    assert all(v >= 0 for v in phases.values())


def test_the_worker_records_phases_that_add_up_to_its_setup_and_its_startup(tmp_path):
    out = tmp_path / "result.json"
    fast = ["--warmup", "2", "--windows", "5", "--window-seconds", "0.1", "--min-updates-per-window", "2"]
    args = ["--config", str(TINY), "--set", "model.vocab_size=512", "--device", "cpu", "--energy", "off", *fast]
    assert main(["benchmark-throughput-worker", *args, "--output", str(out)]) == 0
    r = read(out, WorkerResult)
    assert set(r.setup_phases) == set(SETUP_PHASES)
    assert sum(r.setup_phases.values()) == pytest.approx(r.setup_seconds, rel=1e-9)
    # In this process the worker started long after the interpreter: its startup is that long.
    assert r.startup_seconds is not None and 0 < r.startup_seconds < (startup_seconds() or 0)
