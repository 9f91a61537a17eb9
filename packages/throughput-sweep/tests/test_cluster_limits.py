"""The watcher under a cluster's limits and gaps, against scripted in-memory schedulers:
a submit limit, a job that can never start, a job gone while accounting is down."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from throughput_schema import Protocol, Receipt, Recipe, Throughput, WorkerResult, read, write_atomic
from throughput_schema.layout import RECEIPT, RESULT, SETTLEMENT
from throughput_schema.outcomes import Ok
from throughput_schema.records import WorkerIdentity
from throughput_slurm.sacct import AccountingRow
from throughput_sweep.budget import stopped_on
from throughput_sweep.freezing import create
from throughput_sweep.planning import plan_throughput
from throughput_sweep.profiles import embedded_local_profile
from throughput_sweep.schedulers.base import JobStatus, SubmitFailed
from throughput_sweep.schedulers.slurm.reasons import BUDGET_FIX
from throughput_sweep.schedulers.slurm.text import job_status
from throughput_sweep.watcher import Watcher, WatchOptions

ROOT = Path(__file__).resolve().parents[3]
POLICY = "sbatch refused the job for a submit limit: sbatch: error: QOSMaxSubmitJobPerUserLimit"


def _row(job_id: str, state: str = "COMPLETED") -> AccountingRow:
    return AccountingRow(
        job_id=job_id,
        job_name="x",
        state=state,
        exit_code="0:0",
        partition="p",
        timelimit="00:14:00",
        alloc_tres="cpu=1",
        end="2026-01-01T00:00:01",
        elapsed="00:00:01",
    )


class Scripted:
    """Jobs that write an ok result and end on the poll after their submission."""

    name = "local"
    slots = 8

    def __init__(self, campaign) -> None:
        self.campaign = campaign
        self.jobs: dict[str, Path] = {}
        self.cancelled: list[str] = []

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        job_id = str(len(self.jobs) + 1)
        self.jobs[job_id] = Path(workdir)
        return job_id

    def finish(self, job_id: str) -> None:
        if (self.jobs[job_id] / RESULT).exists():
            return
        recipe = read(self.campaign.recipe_path("tiny"), Recipe)
        write_atomic(
            self.jobs[job_id] / RESULT,
            WorkerResult(
                worker=WorkerIdentity(module="tiny_llm"),
                outcome=Ok(),
                recipe=recipe,
                parameters=1,
                throughput=Throughput(
                    tokens_per_second=1000.0,
                    sequences_per_second=1000.0 / 128,
                    window_tokens_per_second=[1000.0],
                    cv=0.0,
                    unstable=False,
                    update_ms=1.0,
                ),
            ),
        )

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        for j in job_ids:
            self.finish(j)
        return {j: job_status(j, "COMPLETED", row=_row(j), final=True) for j in job_ids}

    async def find_by_token(self, tokens: list[str], since) -> dict[str, list[str]]:
        return {t: [] for t in tokens}

    async def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    async def launch_failure(self, job_id: str) -> str:
        return ""


class SubmitLimited(Scripted):
    """The cluster takes at most `limit` queued jobs; a job ends on its second poll."""

    limit = 1

    def __init__(self, campaign) -> None:
        super().__init__(campaign)
        self.out: dict[str, int] = {}
        self.refusals = 0

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        if len(self.out) >= self.limit:
            self.refusals += 1
            raise SubmitFailed(POLICY, permanent=False, limit=True)
        job_id = await super().submit(script, token=token, workdir=workdir)
        self.out[job_id] = 0
        return job_id

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        statuses = {}
        for j in job_ids:
            if j in self.out:
                self.out[j] += 1
                if self.out[j] < 2:
                    statuses[j] = job_status(j, "RUNNING")
                    continue
                del self.out[j]
            self.finish(j)
            statuses[j] = job_status(j, "COMPLETED", row=_row(j), final=True)
        return statuses


def two_curves(tmp_path: Path, scheduler_type, **options):
    plan = plan_throughput(
        tmp_path / "c",
        models=["tiny"],
        contexts=[128, 256],
        protocol=Protocol(window_seconds=1.0),
        profile=embedded_local_profile(),
        max_batch=options.pop("max_batch", 8),
        worker="tiny_llm",
        root=ROOT,
    )
    campaign = create(plan)
    scheduler = scheduler_type(campaign)
    opts = WatchOptions(poll_min=0.01, poll_max=0.05, submit_backoff_max=0.05, **options)

    async def watch() -> int:
        with anyio.fail_after(60):
            return await Watcher(campaign, scheduler, opts).run()

    return campaign, scheduler, anyio.run(watch)


def test_a_submit_limit_is_a_wait_that_blocks_no_curve(tmp_path, capsys):
    campaign, scheduler, status = two_curves(tmp_path, SubmitLimited, limit_probe=0.02)
    assert status == 0 and scheduler.refusals >= 1
    assert {c.name: c.state for c in campaign.curves()} == {"tiny-c128": "capped", "tiny-c256": "capped"}
    settled = [json.loads(p.read_text()) for p in campaign.root.glob("curves/*/b*/attempt-*/" + SETTLEMENT)]
    assert settled and {s["state"] for s in settled} == {"never-submitted"}
    assert all("QOSMaxSubmitJobPerUserLimit" in s["reason"] for s in settled)
    err = capsys.readouterr().err
    assert err.count("refused a job for a submit limit") == 1, err
    assert "submit limit: 1 job(s) at once (the profile allows 8)" in err


class NeverStarts(Scripted):
    """Every job pends with PartitionTimeLimit until it is cancelled."""

    reason = "PartitionTimeLimit"

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        return {
            j: job_status(j, "CANCELLED", row=_row(j, "CANCELLED by 0"), final=True)
            if j in self.cancelled
            else job_status(j, "PENDING", reason=self.reason)
            for j in job_ids
        }


def test_a_job_that_can_never_start_is_cancelled_and_refused(tmp_path, capsys):
    campaign, scheduler, status = two_curves(tmp_path, NeverStarts, never_start_after=0.1)
    assert status == 0 and sorted(scheduler.cancelled) == ["1", "2"]
    curves = {c.name: c for c in campaign.curves()}
    assert {n: c.state for n, c in curves.items()} == {"tiny-c128": "blocked", "tiny-c256": "blocked"}
    assert "refused" in curves["tiny-c128"].blocked_reason
    assert "PartitionTimeLimit" in curves["tiny-c128"].blocked_reason
    result = read(scheduler.jobs["1"] / RESULT, WorkerResult)
    assert result.outcome.__struct_config__.tag == "refused" and result.outcome.reason == "PartitionTimeLimit"
    assert "time_limit_minutes" in result.outcome.fix and "new campaign" in result.outcome.fix
    assert "could not create" not in result.outcome.message
    assert capsys.readouterr().err.count("can never start: PartitionTimeLimit; cancelled") == 2


class PendsAWhile(Scripted):
    """Every job pends with QOSMaxJobsPerUserLimit on its first three polls, then completes."""

    def __init__(self, campaign) -> None:
        super().__init__(campaign)
        self.polls: dict[str, int] = {}

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        statuses = {}
        for j in job_ids:
            self.polls[j] = self.polls.get(j, 0) + 1
            if self.polls[j] <= 3:
                statuses[j] = job_status(j, "PENDING", reason="QOSMaxJobsPerUserLimit")
            else:
                self.finish(j)
                statuses[j] = job_status(j, "COMPLETED", row=_row(j), final=True)
        return statuses


def test_pending_reasons_are_in_the_progress_line_and_a_wait_is_left_alone(tmp_path, capsys):
    campaign, scheduler, status = two_curves(tmp_path, PendsAWhile, max_batch=1)
    assert status == 0 and not scheduler.cancelled
    assert {c.state for c in campaign.curves()} == {"capped"}
    assert "0 running, 2 pending (QOSMaxJobsPerUserLimit)" in capsys.readouterr().err


class AccountingDown(Scripted):
    """squeue has forgotten every job and sacct fails; the jobs wrote their results."""

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        for j in job_ids:
            self.finish(j)
        note = "gone from squeue; sacct failed: sacct exit 1: slurm_persist_conn_open_without_init"
        return {j: JobStatus(j, "gone", note=note) for j in job_ids}


def test_jobs_gone_while_accounting_is_down_are_settled_from_their_results(tmp_path):
    campaign, scheduler, status = two_curves(tmp_path, AccountingDown, max_batch=2, accounting_down_grace=0.05)
    assert status == 0
    assert {c.name: c.state for c in campaign.curves()} == {"tiny-c128": "capped", "tiny-c256": "capped"}
    for workdir in scheduler.jobs.values():
        receipt = read(workdir / RECEIPT, Receipt)
        assert receipt.accounting is None and "settled from result.json" in receipt.accounting_missing
        assert "slurm_persist_conn" in receipt.accounting_missing


class AccountingDownNoResult(AccountingDown):
    def finish(self, job_id: str) -> None:
        pass  # the job died without a word


def test_a_job_gone_without_a_result_is_lost_after_its_time_limit(tmp_path):
    profile_limit = embedded_local_profile().time_limit_minutes * 60
    campaign, scheduler, status = two_curves(
        tmp_path, AccountingDownNoResult, max_batch=2, accounting_down_grace=0.05, vanished_margin=-profile_limit
    )
    assert status == 0
    assert {c.state for c in campaign.curves()} == {"blocked"}
    result = read(scheduler.jobs["1"] / RESULT, WorkerResult)
    assert result.outcome.__struct_config__.tag == "crashed" and "time limit has passed" in result.outcome.message
    assert "settled as lost" in read(scheduler.jobs["1"] / RECEIPT, Receipt).accounting_missing


class BudgetUsedUp(NeverStarts):
    """Slurm's words: every job pends on a used-up allocation budget until it is cancelled."""

    name = "slurm"
    reason = "AssocGrpGRESMinutes"


def test_a_used_up_budget_stops_the_campaign_and_its_files_say_so(tmp_path, capsys):
    campaign, scheduler, _ = two_curves(tmp_path, BudgetUsedUp, never_start_after=0.05)
    assert sorted(scheduler.cancelled) == ["1", "2"]
    assert "the allocation budget is used up" in capsys.readouterr().err
    results = [read(scheduler.jobs[j] / RESULT, WorkerResult).outcome for j in ("1", "2")]
    assert {(r.reason, r.fix) for r in results} == {("AssocGrpGRESMinutes", BUDGET_FIX)}
    # From the files alone: the refused results' reason, read again by the receipts' backend.
    assert stopped_on(campaign.curves()) == "AssocGrpGRESMinutes"
