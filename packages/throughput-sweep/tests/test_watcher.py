"""The watcher against a scripted in-memory scheduler (no Slurm, no processes)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import anyio

from throughput_schema import AccountingRow, Recipe, Throughput, WorkerResult, read, write_atomic
from throughput_schema.layout import RESULT
from throughput_schema.outcomes import Ok
from throughput_sweep.freezing import create
from throughput_sweep.planning import plan_throughput
from throughput_sweep.profiles import embedded_local_profile
from throughput_sweep.schedulers.base import JobStatus
from throughput_sweep.watcher import Watcher, WatchOptions

ROOT = Path(__file__).resolve().parents[3]


class FinishesDuringPoll:
    """A job that ends, writing its own result, while the watcher's query is in flight."""

    name = "local"
    slots = 1

    def __init__(self, campaign) -> None:
        self.campaign = campaign
        self.workdir: Path | None = None

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        self.workdir = Path(workdir)
        return "1"

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        recipe = read(self.campaign.recipe_path("tiny"), Recipe)
        rate = 1000.0
        own = WorkerResult(
            outcome=Ok(),
            recipe=recipe,
            parameters=1,
            throughput=Throughput(
                tokens_per_second=rate,
                sequences_per_second=rate / 128,
                window_tokens_per_second=[rate],
                cv=0.0,
                unstable=False,
                update_ms=1.0,
            ),
        )
        if not (self.workdir / RESULT).exists():
            write_atomic(self.workdir / RESULT, own)
        row = AccountingRow(
            job_id="1",
            job_name="x",
            state="COMPLETED",
            exit_code="0:0",
            partition="p",
            timelimit="00:14:00",
            alloc_tres="cpu=1",
            end="2026-01-01T00:00:01",
            elapsed="00:00:01",
        )
        return {j: JobStatus(j, "COMPLETED", accounting=row, accounting_final=True) for j in job_ids}

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        return {t: [] for t in tokens}

    async def cancel(self, job_id: str) -> None:
        pass

    async def launch_failure(self, job_id: str) -> str:
        return ""


def one_point(tmp_path: Path, scheduler_type) -> tuple:
    """A one-point tiny campaign watched to its end against `scheduler_type`: (campaign,
    scheduler, the watcher's exit status)."""
    plan = plan_throughput(
        tmp_path / "c",
        models=["tiny"],
        contexts=[128],
        protocol=_protocol(),
        profile=embedded_local_profile(),
        max_batch=1,
        worker="tiny_llm",
        root=ROOT,
    )
    campaign = create(plan)
    scheduler = scheduler_type(campaign)
    options = WatchOptions(poll_min=0.01, poll_max=0.05, progress=False)
    return campaign, scheduler, anyio.run(Watcher(campaign, scheduler, options).run)


def test_a_result_written_while_the_poll_was_in_flight_is_kept(tmp_path):
    campaign, scheduler, status = one_point(tmp_path, FinishesDuringPoll)
    assert status == 0
    result = read(scheduler.workdir / RESULT, WorkerResult)
    assert result.outcome.__struct_config__.tag == "ok" and result.throughput.tokens_per_second == 1000.0
    [curve] = campaign.curves()
    assert curve.state == "capped" and curve.fitting == [1]


def _protocol():
    from throughput_schema import Protocol

    return Protocol(window_seconds=1.0)


class EndsWithoutResult(FinishesDuringPoll):
    """A job that fails before its worker writes anything."""

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        row = AccountingRow(
            job_id="1",
            job_name="x",
            state="FAILED",
            exit_code="1:0",
            partition="p",
            timelimit="00:14:00",
            alloc_tres="cpu=1",
            end="2026-01-01T00:00:01",
            elapsed="00:00:01",
        )
        return {j: JobStatus(j, "FAILED", accounting=row, accounting_final=True) for j in job_ids}


def test_the_result_written_for_a_job_that_left_none_names_the_worker_it_stands_in_for(tmp_path):
    _, scheduler, _ = one_point(tmp_path, EndsWithoutResult)
    result = read(scheduler.workdir / RESULT, WorkerResult)
    assert result.outcome.__struct_config__.tag == "crashed"
    assert (result.worker.module, result.worker.written_by) == ("tiny_llm", "controller")
