"""Reconciliation of submissions, and the result of every finished job.

`attempt.submit_attempt` writes the intent (fresh token, point, script hash, time) and
fsyncs it before the scheduler is asked, submits with the token as the job's name and
comment, then writes the receipt. An intent without a receipt is settled by asking the
scheduler for its token: one job is adopted as the receipt (`adopted=True`); none, while
every query answered, means it was never submitted (`settlement.json`: never-submitted; the point gets a fresh attempt);
more than one job, or queries that keep failing, is ambiguous and blocks the curve until
`throughput-sweep reconcile` settles it by hand.

A job that ends without `result.json` (time limit, host OOM kill, cancellation, node
failure, a crash before the worker wrote anything) gets one derived from its final
accounting, so every finished job has a result.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from throughput_schema import (
    JobAccounting,
    Receipt,
    Settlement,
    WorkerIdentity,
    WorkerRequest,
    WorkerResult,
    read,
    write_atomic,
    write_new,
)
from throughput_schema.campaigns import SettledBy, SettlementState
from throughput_schema.configs import SchedulerName
from throughput_schema.layout import RECEIPT, REQUEST, RESULT, SETTLEMENT
from throughput_schema.outcomes import (
    EXIT_CODES,
    SCHEDULER_PHASE,
    Cancelled,
    Crashed,
    HostOom,
    NodeFail,
    Refused,
    StorageFull,
    Timeout,
)
from throughput_schema.recipe import parameter_count
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign, now
from throughput_sweep.faults import should_crash
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import OUTCOME_OF_STATE, JobStatus, Pending, QueryFailed, Scheduler


def parse_time(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# --------------------------------------------------------------------- reconciliation


async def settle_intents(
    campaign: Campaign,
    scheduler: Scheduler,
    infos: list[AttemptInfo],
    *,
    give_up: bool,
    say_late: Callable[[str], None] | None = None,
) -> tuple[int, str]:
    """Settle every intent without a receipt, in one token lookup. Returns (settled count,
    query error or '').

    On a failed query nothing is decided unless `give_up`, when the unsettled intents become
    ambiguous (the user settles them with `reconcile`).

    Where `say_late` is given (the watcher passes its `say`), the lookup also covers each
    late intent, one whose job wrote its result before the receipt: the watcher died between
    sbatch and the receipt, and the job ended before the next watcher looked; or sbatch's
    answer named no job and the job ended before a lookup could answer. Its status comes
    from the result, but the job still needs its receipt (its accounting, the audit's job
    checks), so it is adopted where exactly one job carries the token. With none, or with
    the query failing, it is left for the next lookup. With more than one, picking the job that wrote the result would be
    a guess: none is adopted, and `say_late` is told the jobs and the `reconcile` command
    that records one.
    """
    pending = [i for i in infos if i.status == "unsettled"]
    late = [i for i in infos if late_intent(i)] if say_late else []
    if not pending and not late:
        return 0, ""
    both = pending + late
    # Every one has its intent (an unsettled attempt is its intent and nothing after it).
    since = min(parse_time(i.attempt.intent.created_at) for i in both if i.attempt.intent is not None)
    try:
        found = await scheduler.find_by_token([i.attempt.token for i in both], since)
    except QueryFailed as exc:
        if give_up:
            for info in pending:
                _settle(info, "ambiguous", f"the scheduler could not be queried for the token: {exc}")
            return len(pending), str(exc)
        return 0, str(exc)
    for info in pending:
        token = info.attempt.token
        jobs = found.get(token, [])
        if len(jobs) == 1:
            adopt(info.attempt.path, token, jobs[0], scheduler.name)
        elif not jobs:
            _settle(info, "never-submitted", "no job carries this token in the queue or the accounting")
        else:
            _settle(info, "ambiguous", f"{len(jobs)} jobs carry this token: {', '.join(jobs)}", jobs)
    adopted = 0
    for info in late:
        token = info.attempt.token
        jobs = found.get(token, [])
        if len(jobs) == 1:
            adopt(info.attempt.path, token, jobs[0], scheduler.name)
            adopted += 1
        elif len(jobs) > 1 and say_late is not None:
            say_late(
                f"{info.attempt.path.relative_to(campaign.root)} has its result but no receipt, and "
                f"{len(jobs)} jobs carry its token ({', '.join(jobs)}): none is adopted; "
                f"`throughput-sweep reconcile --output {campaign.root} --token {token} --job-id ID` "
                "records the one that ran"
            )
    return len(pending) + adopted, ""


def late_intent(info: AttemptInfo) -> bool:
    """An intent whose job wrote its result before the receipt, and no lookup settled it yet."""
    return info.ran_without_receipt and info.settlement is None


def adopt(directory: Path, token: str, job_id: str, scheduler: SchedulerName) -> Receipt:
    receipt = Receipt(token=token, job_id=job_id, submitted_at=now(), scheduler=scheduler, adopted=True)
    write_atomic(directory / RECEIPT, receipt)
    return receipt


def _settle(
    info: AttemptInfo, state: SettlementState, reason: str, jobs: Sequence[str] = (), by: SettledBy = "watcher"
) -> None:
    write_atomic(
        info.attempt.path / SETTLEMENT,
        Settlement(token=info.attempt.token, state=state, reason=reason, decided_at=now(), job_ids=list(jobs), by=by),
    )


def reconcile_by_hand(campaign: Campaign, token: str, job_id: str | None) -> str:
    """`throughput-sweep reconcile`: the user's decision for one unsettled or ambiguous intent."""
    from throughput_sweep.campaign import CampaignError

    matches = [i for i in campaign.infos() if i.attempt.intent is not None and i.attempt.intent.token == token]
    if not matches:
        raise CampaignError(f"--token {token}: no intent with this token in {campaign.root}")
    info = matches[0]
    if info.attempt.receipt is not None:
        raise CampaignError(
            f"--token {token}: already settled (job {info.attempt.receipt.job_id}); nothing to reconcile"
        )
    where = info.attempt.path.relative_to(campaign.root)
    if job_id is None:
        _settle(info, "never-submitted", "settled by hand: no job was submitted", by="user")
        return f"{where}: recorded as never submitted; the point will be retried in a fresh attempt"
    if not job_id.isdigit():
        raise CampaignError(f"--job-id {job_id!r}: expected a numeric job id")
    adopt(info.attempt.path, token, job_id, campaign.manifest.profile.scheduler)
    extra = ""
    if info.settlement is not None and len(info.settlement.job_ids) > 1:
        others = [j for j in info.settlement.job_ids if j != job_id]
        cancel = backend(campaign.manifest.profile.scheduler).cancel_command or "jobs"
        extra = f"; cancel the other jobs if they are still queued: {cancel} {' '.join(others)}"
    return f"{where}: adopted job {job_id} as this point's receipt{extra}"


# ----------------------------------------------------------------- finished jobs


def outcome_of(status: JobStatus, deadline_seconds: float, launch_failure: str | None = None):
    """The outcome of a job that ended so without a result. `launch_failure` is None when
    the job's script started (its output file exists)."""
    word = status.word
    code = status.accounting.exit_code if status.accounting else None
    note = f"job ended {word} without result.json"
    if launch_failure is not None:
        # The output file is created when the script starts, so without it nothing ran.
        note = f"job ended {word} before its batch script started (no job output file in the attempt folder)"
        if launch_failure:
            note += f"; {launch_failure}"
    outcome = OUTCOME_OF_STATE.get(status.state, "crashed")
    if outcome == "crashed" and code == EXIT_CODES["storage_full"]:
        # The job's watchdog said so by its exit status: it could not write the result.
        return StorageFull(
            phase=SCHEDULER_PHASE,
            message=f"result could not be written (disk full or over quota): {note}, exit status {code}; free space "
            "in the campaign folder, then run --resume --retry-failed (the job log names any copy kept on its node)",
        )
    if outcome == "timeout":
        return Timeout(
            phase=SCHEDULER_PHASE, message=f"{note} (scheduler time limit)", deadline_seconds=deadline_seconds
        )
    if outcome == "host_oom":
        return HostOom(phase=SCHEDULER_PHASE, message=f"{note} (host memory limit)")
    if outcome == "cancelled":
        return Cancelled(phase=SCHEDULER_PHASE, message=note)
    if outcome == "node_fail":
        return NodeFail(phase=SCHEDULER_PHASE, message=note)
    return Crashed(phase=SCHEDULER_PHASE, message=note, exit_code=code)


def write_missing_result(
    campaign: Campaign,
    info: AttemptInfo,
    status: JobStatus | None,
    *,
    launch_failure: str | None = None,
    outcome=None,
    replace: bool = False,
) -> Path | None:
    """A result derived from the scheduler's final word for a job that wrote none: `status`,
    or `outcome` where the controller settles the job itself (`status` None).

    A result that is there, or that appears on the shared filesystem while this one is
    written, is never replaced: the derived record is published only where no file is
    (`write_new`), and None is returned where the job's own record won. `replace`: the caller
    has read the result there and replaces it (a stop record the job's watchdog wrote
    without knowing why, ended_early.py).
    """
    path = info.attempt.path / RESULT
    if path.exists() and not replace:
        return None
    a, m = info.attempt, campaign.manifest
    request = read(a.path / REQUEST, WorkerRequest)  # written before the job's intent
    recipe, protocol, deadline = request.recipe, request.protocol, request.deadline_seconds
    if outcome is None:
        assert status is not None, "a result is derived from the scheduler's word or given"
        outcome = outcome_of(status, deadline, launch_failure=launch_failure)
    code = status.accounting.exit_code if status is not None and status.accounting is not None else None
    result = WorkerResult(
        outcome=outcome,
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode=m.kind,
        protocol=protocol,
        finished_at=now(),
        exit_code=code if code is not None else -1,
        worker=WorkerIdentity(module=request.worker, written_by="controller"),
    )
    if should_crash("while-result"):
        # Die half-way through an atomic write: a temp file exists, result.json does not.
        tmp = path.parent / f".{RESULT}.crash.tmp"
        tmp.write_bytes(msgspec.json.encode(result)[:40])
        os.kill(os.getpid(), signal.SIGKILL)
    if replace:
        write_atomic(path, result)
        return path
    return path if write_new(path, result) else None


def write_refused_result(campaign: Campaign, info: AttemptInfo, pending: Pending) -> Path | None:
    """The result of a job that pends for a reason waiting cannot clear, written before the
    watcher cancels it: the point is settled as refused, with the reason and the fix."""
    job = info.attempt.receipt.job_id if info.attempt.receipt else "?"
    reason, fix = pending.text, pending.fix
    message = (
        f"job {job} pended with reason {reason}, which waiting cannot clear; cancelled before it started. Fix: {fix}"
    )
    outcome = Refused(phase=SCHEDULER_PHASE, message=message, reason=reason, fix=fix)
    return write_missing_result(campaign, info, None, outcome=outcome)


def record_accounting(info: AttemptInfo, accounting: JobAccounting | None, final: bool, missing: str = "") -> None:
    """The receipt keeps the backend's accounting as given. `missing`: why there is no
    accounting to record (written into the receipt once)."""
    receipt = info.attempt.receipt
    if receipt is not None and accounting is None and missing and not receipt.accounting_missing:
        write_atomic(info.attempt.path / RECEIPT, msgspec.structs.replace(receipt, accounting_missing=missing))
        return
    if receipt is None or accounting is None:
        return
    if receipt.accounting_final or (receipt.accounting == accounting and receipt.accounting_final == final):
        return
    write_atomic(
        info.attempt.path / RECEIPT, msgspec.structs.replace(receipt, accounting=accounting, accounting_final=final)
    )
