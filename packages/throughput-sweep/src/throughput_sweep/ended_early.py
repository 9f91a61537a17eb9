"""A job its scheduler ended well before its time limit: its result says what the scheduler says.

An allocation budget used up while jobs run, or another limit a scheduler enforces on running
jobs, ends them as TIMEOUT long before their time limit (on Slurm: GrpTRESMins without `safe`).
The job's watchdog only saw a SIGTERM before the time limit and wrote a `cancelled` stop
record. `settle` replaces such a record (one the watchdog or the controller wrote, never a
worker's own result) by a `timeout` result with `ended_early` set, whose message is the
scheduler's: the state, the elapsed time against the limit, and what the backend read of
why (`Backend.early_end`: on Slurm, slurmstepd's line in the job's output and scontrol's
reason). It is never an OOM.

Such a point is not the point's doing: `early_retry` retries it at once, once. Where a budget
is used up the retry pends with the budget's reason, and the watcher stops on the budget
(budget.py), instead of blocking the curve behind a failure.
"""

from __future__ import annotations

from pathlib import Path

from throughput_schema import WorkerResult, read
from throughput_schema.layout import RESULT
from throughput_schema.outcomes import SCHEDULER_PHASE, Timeout, time_limit_slack
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.progress import fmt_seconds
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import JobStatus
from throughput_sweep.submission import write_missing_result
from throughput_sweep.watcher_state import WatcherView


def elapsed_and_limit(status: JobStatus, limit_minutes: float) -> tuple[float, float] | None:
    """(seconds the job ran, its time limit in seconds) where it ended TIMEOUT well before
    the limit (`time_limit_slack`); None otherwise, or while the accounting has no elapsed time."""
    acc = status.accounting
    if status.state != "timeout" or acc is None or acc.elapsed_seconds is None:
        return None
    elapsed, limit = acc.elapsed_seconds, acc.time_limit_seconds or limit_minutes * 60
    return (elapsed, limit) if elapsed < limit - time_limit_slack(limit) else None


def exit_code_pending(status: JobStatus, limit_minutes: float) -> bool:
    """sacct first records a job Slurm ended early with ExitCode 0:0, and the batch script's
    code (the watchdog's 8, or 0:15) later, at times only minutes later: not final meanwhile, so a
    later watcher (a resume) asks again."""
    acc = status.accounting
    return (
        acc is not None
        and (acc.exit_code, acc.signal) == (0, 0)
        and elapsed_and_limit(status, limit_minutes) is not None
    )


def message(status: JobStatus, elapsed: float, limit: float, title: str, said: str) -> str:
    """`said`: the backend's clause (`Backend.early_end`), after the elapsed time against the limit."""
    return (
        f"{title} ended the job {status.word} after {fmt_seconds(elapsed)} of its {fmt_seconds(limit)} time limit"
        f"{said}; not the point's doing: it is retried (an allocation budget used up stops the campaign)"
    )


async def settle(w: WatcherView, info: AttemptInfo, status: JobStatus) -> bool:
    """Where the job ended early: its result from the scheduler's word (True when written)."""
    receipt = info.attempt.receipt
    assert receipt is not None, "only a polled job, which has a receipt, ends"
    times = elapsed_and_limit(status, w.campaign.manifest.profile.time_limit_minutes)
    if times is None:
        return False
    path = info.attempt.path / RESULT
    if path.exists():
        current = read(path, WorkerResult)
        # The worker's own result stands (and one whose writer the upgrade could not tell);
        # a result settled as ended early already is settled.
        own = current.worker.written_by in ("worker", "upgrade")
        if own or (isinstance(current.outcome, Timeout) and current.outcome.ended_early):
            return False
    ran = backend(w.scheduler.name)
    reason = await w.scheduler.ended_reason(receipt.job_id)
    said = ran.early_end(info.attempt.path / ran.job_log(receipt.job_id), reason)
    outcome = Timeout(
        phase=SCHEDULER_PHASE,
        message=message(status, *times, ran.title, said),
        deadline_seconds=times[1],
        ended_early=True,
    )
    write_missing_result(w.campaign, info, status, outcome=outcome, replace=True)
    w.say(f"job {receipt.job_id} ({info.attempt.path.relative_to(w.campaign.root)}): {outcome.message}")
    return True


def _early(info: AttemptInfo) -> bool:
    result = info.attempt.result
    return result is not None and isinstance(result.outcome, Timeout) and result.outcome.ended_early


def early_retry(infos: list[AttemptInfo]) -> frozenset[Path]:
    """Points whose latest attempt Slurm ended early, unless the attempt before it ended so too."""
    points: dict[tuple[str, int], list[AttemptInfo]] = {}
    for info in infos:
        if info.status != "abandoned":  # nothing of it reached the scheduler
            points.setdefault((info.attempt.curve, info.batch), []).append(info)
    paths = set()
    for attempts in points.values():
        attempts.sort(key=lambda i: i.number)
        if _early(attempts[-1]) and not (len(attempts) > 1 and _early(attempts[-2])):
            paths.add(attempts[-1].attempt.path)
    return frozenset(paths)
