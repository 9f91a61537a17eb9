"""A job that ended before its result.json is seen here.

On a cluster the campaign folder is usually on a shared filesystem: a file written on a
compute node reaches the login node only when the client's caches expire (NFS's attribute
cache alone holds a folder's view up to 60 s, and `lookupcache=all` caches "no such file"
too). The scheduler's word that a job ended can so come well before its result. The
watcher then waits `result_grace_seconds` (the profile's) from the moment it first saw the
job ended before it derives a result, and keeps reading the job's accounting meanwhile; the
derived record is never published over one that appeared (`submission.write_missing_result`).
Backends whose jobs run on this machine (`remote_nodes` False) see their files at once and wait
for nothing.
"""

from __future__ import annotations

from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import JobStatus
from throughput_sweep.submission import write_missing_result
from throughput_sweep.watcher_state import WatcherView

WAITING = "waiting for the result to appear"


def grace_seconds(profile) -> float:
    """How long a job's result may take to appear after the job ended, for this profile."""
    return profile.result_grace_seconds if backend(profile.scheduler).remote_nodes else 0.0


def awaiting(w: WatcherView, info: AttemptInfo, clock: float) -> bool:
    """True while the grace for this ended job's result runs (said once per job)."""
    receipt = info.attempt.receipt
    assert receipt is not None, "only a polled job, which has a receipt, ends"
    grace = grace_seconds(w.campaign.manifest.profile)
    waited = clock - w.st.first_seen_finished[receipt.job_id]
    if waited >= grace:
        return False
    w.say_new(
        f"job {receipt.job_id} ({info.attempt.path.relative_to(w.campaign.root)}) ended "
        f"{w.st.finished[receipt.job_id].upper()} and no result.json is seen yet; {WAITING} "
        f"(up to {grace:.0f} s: a shared filesystem shows a compute node's files late)"
    )
    return True


async def settle(w: WatcherView, info: AttemptInfo, status: JobStatus, clock: float) -> bool:
    """An ended job without a visible result: False while its grace runs; then its derived
    result, or the job's own where that appeared meanwhile (True)."""
    if awaiting(w, info, clock):
        return False
    job_id = status.job_id
    log = info.attempt.path / backend(w.scheduler.name).job_log(job_id)
    launch = None if log.exists() else await w.scheduler.launch_failure(job_id)
    if write_missing_result(w.campaign, info, status, launch_failure=launch) is None:
        w.say(f"job {job_id}: its own result.json appeared; kept it")
    return True
