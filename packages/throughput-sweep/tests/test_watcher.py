"""The watcher against a scripted in-memory scheduler (no Slurm, no processes)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import anyio

from throughput_schema import Recipe, Throughput, WorkerResult, read, write_atomic
from throughput_schema.layout import RESULT
from throughput_schema.outcomes import Ok
from throughput_schema.records import WorkerIdentity
from throughput_slurm.sacct import AccountingRow
from throughput_sweep.attempt import submit_attempt
from throughput_sweep.campaign import Campaign, open_campaign
from throughput_sweep.curves import pick
from throughput_sweep.freezing import create
from throughput_sweep.planning import plan_throughput
from throughput_sweep.profiles import embedded_local_profile
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import JobStatus, QueryFailed, SubmitFailed
from throughput_sweep.schedulers.slurm.text import job_status
from throughput_sweep.submission import reconcile_by_hand, write_missing_result
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
            worker=WorkerIdentity(module="tiny_llm"),
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
        return {j: job_status(j, "COMPLETED", row=row, final=True) for j in job_ids}

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        return {t: [] for t in tokens}

    async def cancel(self, job_id: str) -> None:
        pass

    async def launch_failure(self, job_id: str) -> str:
        return ""


def tiny_campaign(tmp_path: Path, contexts: list[int]) -> Campaign:
    """The tiny preset at `contexts`, batch 1 alone, on the local scheduler."""
    plan = plan_throughput(
        tmp_path / "c",
        models=["tiny"],
        contexts=contexts,
        protocol=_protocol(),
        profile=embedded_local_profile(),
        max_batch=1,
        worker="tiny_llm",
        root=ROOT,
    )
    return create(plan)


def one_point(tmp_path: Path, scheduler_type) -> tuple:
    """A one-point tiny campaign watched to its end against `scheduler_type`: (campaign,
    scheduler, the watcher's exit status)."""
    campaign = tiny_campaign(tmp_path, [128])
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
        return {j: job_status(j, "FAILED", row=row, final=True) for j in job_ids}


def test_the_result_written_for_a_job_that_left_none_names_the_worker_it_stands_in_for(tmp_path):
    _, scheduler, _ = one_point(tmp_path, EndsWithoutResult)
    result = read(scheduler.workdir / RESULT, WorkerResult)
    assert result.outcome.__struct_config__.tag == "crashed"
    assert (result.worker.module, result.worker.written_by) == ("tiny_llm", "controller")


# ----------------------------------------------------------------- start-up: intents without a receipt
# One token lookup settles the unsettled intents (nothing after the intent) and the late ones
# (the job wrote its result before the receipt).

UNSETTLED = "curves/tiny-c128/b1/attempt-1"
LATE = "curves/tiny-c256/b1/attempt-1"


class Lookup:
    """sbatch fails as if the job might exist; each token lookup answers `jobs[folder]`."""

    name = "local"
    slots = 12

    def __init__(self, root: Path, jobs: dict[str, list[str]] | None) -> None:
        self.root, self.jobs = root, jobs
        self.lookups: list[list[str]] = []

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        raise SubmitFailed("sbatch: timed out", permanent=False, maybe_submitted=True)

    async def poll(self, job_ids):
        return {}

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        self.lookups.append(tokens)
        if self.jobs is None:
            raise QueryFailed("slurmctld is down")
        by_token = {json.loads((self.root / f / "intent.json").read_text())["token"]: j for f, j in self.jobs.items()}
        return {t: by_token.get(t, []) for t in tokens}

    async def cancel(self, job_id: str) -> None:
        pass

    async def launch_failure(self, job_id: str) -> str:
        return ""


def start_up(tmp_path: Path, jobs: dict[str, list[str]] | None) -> tuple[Path, Lookup]:
    """Two intents without a receipt, the second one's job ended with its result; then a
    watcher's start-up against `jobs`. Returns the campaign folder and the scheduler."""
    campaign = tiny_campaign(tmp_path, [128, 256])
    scheduler = Lookup(campaign.root, jobs)
    for point in pick(campaign.curves(), 12):
        assert not anyio.run(submit_attempt, campaign, scheduler, point).job_id
    [late] = [i for i in campaign.infos() if i.attempt.path == campaign.root / LATE]
    write_missing_result(campaign, late, job_status("", "FAILED"))
    options = WatchOptions(poll_min=0.01, poll_max=0.05, progress=False, settle_attempts=2)
    anyio.run(Watcher(campaign, scheduler, options).startup)
    return campaign.root, scheduler


def files(attempt: Path) -> list[str]:
    return sorted(p.name for p in attempt.iterdir())


def test_one_lookup_adopts_the_one_job_of_each_intent(tmp_path):
    root, scheduler = start_up(tmp_path, {UNSETTLED: ["11"], LATE: ["12"]})
    assert len(scheduler.lookups) == 1 and len(scheduler.lookups[0]) == 2
    for folder, job in ((UNSETTLED, "11"), (LATE, "12")):
        receipt = json.loads((root / folder / "receipt.json").read_text())
        assert (receipt["job_id"], receipt["adopted"]) == (job, True)
    assert "settlement.json" not in files(root / UNSETTLED) + files(root / LATE)


def test_no_job_settles_the_unsettled_intent_and_leaves_the_late_one(tmp_path):
    root, _ = start_up(tmp_path, {})
    settled = json.loads((root / UNSETTLED / "settlement.json").read_text())
    assert settled["state"] == "never-submitted"
    assert files(root / LATE) == ["intent.json", "job.sh", "request.json", "result.json"]


def test_two_jobs_adopt_neither_and_the_late_one_is_said_with_the_reconcile_command(tmp_path, capsys):
    root, _ = start_up(tmp_path, {UNSETTLED: ["11", "13"], LATE: ["12", "14"]})
    settled = json.loads((root / UNSETTLED / "settlement.json").read_text())
    assert (settled["state"], settled["job_ids"]) == ("ambiguous", ["11", "13"])
    assert files(root / LATE) == ["intent.json", "job.sh", "request.json", "result.json"]
    token = json.loads((root / LATE / "intent.json").read_text())["token"]
    [line] = [x for x in capsys.readouterr().err.splitlines() if LATE in x]
    assert "2 jobs carry its token (12, 14): none is adopted" in line
    assert f"reconcile --output {root} --token {token} --job-id ID" in line


def test_adopting_one_of_two_jobs_by_hand_names_the_other_in_its_schedulers_words(tmp_path):
    root, _ = start_up(tmp_path, {UNSETTLED: ["11", "13"], LATE: ["12"]})
    campaign = open_campaign(root)
    token = json.loads((root / UNSETTLED / "intent.json").read_text())["token"]
    line = reconcile_by_hand(campaign, token, "11")
    assert line.endswith(
        "adopted job 11 as this point's receipt; cancel the other jobs if they are still queued: jobs 13"
    )
    assert backend(campaign.manifest.profile.scheduler).cancel_command == ""
    assert backend("slurm").cancel_command == "scancel"


def test_a_failed_lookup_leaves_the_late_intent_for_the_next_start(tmp_path):
    root, scheduler = start_up(tmp_path, None)
    assert len(scheduler.lookups) == 2  # settle_attempts: the unsettled intent is asked for again
    assert json.loads((root / UNSETTLED / "settlement.json").read_text())["state"] == "ambiguous"
    assert files(root / LATE) == ["intent.json", "job.sh", "request.json", "result.json"]
