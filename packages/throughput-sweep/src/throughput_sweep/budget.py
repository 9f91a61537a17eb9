"""An allocation budget (GrpTRESMins) used up while a campaign runs: the watcher stops on it,
and every output says so.

  * A job pending for an allocation budget used up (its backend's `Pending.budget`; on
    Slurm, a reason of `schedulers.slurm.reasons.BUDGET_USED_UP`) never starts by waiting:
    `cluster_limits.refuse` settles it like any never-starting job (a `refused` result with
    the reason and its fix, `schedulers.slurm.reasons.BUDGET_FIX`, then scancel) and calls `stop`: the watcher
    submits nothing more, cancels and settles its other pending jobs the same way
    (`settle_pending`), lets the running ones end, and the run exits with `EXIT_BUDGET` and
    `budget_line`.
  * From the files alone (`stopped_on`): a point whose latest attempt was refused for a
    budget reason (the refused result's reason, classified again by the receipt's
    backend), while no job is out, is a campaign stopped on its budget; `status` says so
    and exits with `EXIT_BUDGET` too.
  * `run --resume` retries those points (`budget_retry`), without --retry-failed: once the
    budget is raised they run; while it is not, the first one pends again and the run stops
    again, having spent nothing.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from throughput_schema.outcomes import SCHEDULER_PHASE, Refused
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import JobStatus, Pending, QueryFailed
from throughput_sweep.submission import write_missing_result
from throughput_sweep.watcher_state import WatcherView


def budget_reason(info: AttemptInfo) -> str:
    """The budget reason an attempt was refused for ('' when it was not)."""
    result, receipt = info.attempt.result, info.attempt.receipt
    if result is None or receipt is None or not isinstance(result.outcome, Refused):
        return ""
    reason = backend(receipt.scheduler).read_pending(result.outcome.reason)
    return reason.text if reason.budget and reason.never_starts else ""


def stopped_on(curves: list[Curve]) -> str:
    """The budget reason the campaign stopped on ('' when it did not, or jobs are still out)."""
    if any(c.running for c in curves):
        return ""
    return next((r for c in curves for i in c.points.values() if (r := budget_reason(i))), "")


def budget_retry(curves: list[Curve]) -> frozenset[Path]:
    """The latest attempts of points refused for a budget reason: a resume retries them."""
    return frozenset(i.attempt.path for c in curves for i in c.points.values() if budget_reason(i))


def budget_line(campaign: Campaign, reason: str, driver: str) -> str:
    """What run and status say about a campaign stopped on its budget, in one line, in the words
    of its scheduler's backend."""
    where = shlex.quote(str(campaign.root))
    ran = backend(campaign.manifest.profile.scheduler)
    check = f" (check with: {ran.budget_check})" if ran.budget_check else ""
    return (
        f"stopped on the allocation budget: {ran.title} holds this campaign's jobs with reason {reason} "
        f"(the account's budget is used up), so no job was left pending; ask for more{check}, "
        f"then go on with: {driver} run --output {where} --resume; "
        "or run the rest with a profile that uses another account, in a new --output"
    )


def stop(w: WatcherView, pending: Pending) -> None:
    """Stop submitting: the budget behind `pending` is used up."""
    if not w.st.budget:
        w.st.budget = pending
        reason = pending.text
        w.say(
            f"the allocation budget is used up (a job pends with reason {reason}): submitting nothing more, "
            "cancelling the jobs still pending, waiting for the running ones to end"
        )


async def settle_pending(w: WatcherView, info: AttemptInfo, status: JobStatus) -> bool:
    """After `stop`: a pending job of the campaign, whatever its own reason, waits on the same
    budget; settle it refused for the budget (its result first), then cancel it."""
    receipt = info.attempt.receipt
    assert receipt is not None, "only a polled job, which has a receipt, is pending"
    own = (status.pending.text if status.pending else "") or "no reason given"
    budget = w.st.budget
    assert budget is not None, "settle_pending runs only after the budget stop"
    message = (
        f"job {receipt.job_id} was pending ({own}) when the campaign stopped on its allocation budget "
        f"({budget.text}); cancelled before it started. Fix: {budget.fix}"
    )
    outcome = Refused(phase=SCHEDULER_PHASE, message=message, reason=budget.text, fix=budget.fix)
    wrote = write_missing_result(w.campaign, info, None, outcome=outcome) is not None
    if receipt.job_id not in w.st.refused_cancelled:
        try:
            await w.scheduler.cancel(receipt.job_id)
        except QueryFailed as exc:
            w.say(f"cannot cancel job {receipt.job_id} after the budget stop: {exc}; retrying")
            return wrote
        w.st.refused_cancelled.add(receipt.job_id)
    return wrote
