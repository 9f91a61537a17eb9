"""What the watcher does where a real cluster's limits and gaps show: a submit limit, a job
that can never start, a job gone from squeue while Slurm's accounting is not available.

  * `SlotLimit`: sbatch refused a job for a submit limit (Slurm's `schedulers.slurm.reasons`: "limit"); the
    refused intent is settled never-submitted (no job was made, the point waits for its
    turn). The watcher keeps at most as many jobs out as it had when the limit hit (one,
    when the user's other jobs fill the limit), says so once, shows it in the progress
    line, and allows one more job every `WatchOptions.limit_probe` seconds until it is
    back at the profile's max_concurrent_jobs. No curve is blocked by a limit.
  * `refuse`: a job pending for a reason its backend says never starts (on Slurm, those of
    `schedulers.slurm.reasons.NEVER_STARTS`) gets a `refused` result (the reason and the fix), then
    is cancelled; the curve blocks with the reason.
    For a used-up allocation budget the watcher also stops submitting (budget.py).
  * `settle_vanished`: the job is gone (squeue answered without it and sacct gave no row:
    slurmdbd down, accounting disabled) for `accounting_down_grace`: the job is settled from its
    attempt folder (its result.json), or, without one, as lost once its time limit has
    passed since its submission (plus `vanished_margin`). Its slot is freed and its
    receipt says why it has no accounting (`Receipt.accounting_missing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from throughput_schema.layout import RESULT
from throughput_schema.outcomes import SCHEDULER_PHASE, Crashed
from throughput_sweep import budget
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import JobStatus, Pending, QueryFailed
from throughput_sweep.submission import parse_time, record_accounting, write_missing_result, write_refused_result
from throughput_sweep.watcher_state import WatcherView


@dataclass
class SlotLimit:
    allowed: int  # the profile's max_concurrent_jobs
    slots: int
    probe_every: float
    since: float | None = None  # when the slots were last lowered or probed; None: not lowered
    said: bool = False

    def lower(self, out: int, now: float) -> int:
        """Refused for a submit limit with `out` of ours queued: the slots to keep."""
        self.slots = max(1, min(self.slots, out))
        self.since = now
        return self.slots

    def probe(self, now: float) -> int:
        """One more slot once a probe interval has passed since the last refusal or probe."""
        if self.since is not None and now - self.since >= self.probe_every:
            self.slots = min(self.allowed, self.slots + 1)
            self.since = None if self.slots == self.allowed else now
        return self.slots

    @property
    def note(self) -> str:
        if self.slots >= self.allowed:
            return ""
        return f"submit limit: {self.slots} job(s) at once (the profile allows {self.allowed})"


def never_starts_now(w: WatcherView, job_id: str, status: JobStatus | None, clock: float) -> bool:
    """Pending for a reason that waiting cannot clear, the same one for `never_start_after`:
    right after sbatch, before its first scheduling pass, Slurm 22.05 shows a job that is
    merely too long for its partition as PartitionConfig, then as PartitionTimeLimit."""
    if status is None or status.pending is None or not status.pending.never_starts:
        w.st.never_since.pop(job_id, None)
        return False
    reason, since = w.st.never_since.get(job_id, (None, clock))
    if reason != status.pending.text:
        w.st.never_since[job_id] = (status.pending.text, clock)
        since = clock
    return clock - since >= w.options.never_start_after


async def refuse(w: WatcherView, info: AttemptInfo, pending: Pending) -> bool:
    """A job pending for a reason that waiting cannot clear: settle the point as refused
    (its result first, so a crash in between still blocks the curve), then cancel it."""
    receipt = info.attempt.receipt
    assert receipt is not None, "only a polled job, which has a receipt, is refused"
    job_id, reason = receipt.job_id, pending.text
    wrote = write_refused_result(w.campaign, info, pending) is not None
    if job_id not in w.st.refused_cancelled:
        try:
            await w.scheduler.cancel(job_id)
        except QueryFailed as exc:
            w.say(f"cannot cancel job {job_id}, which can never start ({reason}): {exc}; retrying")
            return wrote
        w.st.refused_cancelled.add(job_id)
        w.say(f"job {job_id} ({info.attempt.path.relative_to(w.campaign.root)}) can never start: {reason}; cancelled")
    if pending.budget:
        budget.stop(w, pending)
    return wrote


def settle_vanished(w: WatcherView, info: AttemptInfo, status: JobStatus, clock: float) -> bool:
    """A job that the queue no longer lists while the accounting gives no row: after
    `accounting_down_grace`, settle it from its attempt folder (its result, or, once its
    time limit has surely passed, as lost), free its slot and say so in the receipt."""
    receipt = info.attempt.receipt
    assert receipt is not None, "only a polled job, which has a receipt, vanishes"
    if status.state != "gone":
        return False  # the queue did not answer either: nothing is known
    first = w.st.vanished_since.setdefault(receipt.job_id, clock)
    if clock - first < w.options.accounting_down_grace:
        return False
    title = backend(w.scheduler.name).title
    has_result = (info.attempt.path / RESULT).exists()
    if not has_result:
        limit = w.campaign.manifest.profile.time_limit_minutes * 60 + w.options.vanished_margin
        if (datetime.now(UTC) - parse_time(receipt.submitted_at)).total_seconds() < limit:
            return False
        note = (
            f"the queue no longer lists the job and {title}'s accounting is not available; its time limit "
            "has passed since its submission and it left no result.json"
        )
        write_missing_result(w.campaign, info, None, outcome=Crashed(phase=SCHEDULER_PHASE, message=note))
    w.st.finished[receipt.job_id] = status.state
    w.st.accounting_given_up.add(receipt.job_id)
    why = f"{title}'s accounting was not available ({status.note}); " + (
        "settled from result.json" if has_result else "settled as lost after its time limit"
    )
    record_accounting(info, None, False, missing=why)
    w.say(f"job {receipt.job_id}: {why}")
    return True
