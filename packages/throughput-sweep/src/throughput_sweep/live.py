"""What `status` adds to the campaign's files: the scheduler's word on the jobs the files
say are out, and whether a watcher is alive.

One `poll` of the campaign's scheduler (for Slurm: ONE squeue, plus one sacct for the jobs
squeue no longer lists) tells running from pending (with the scheduler's reason) from ended while
no watcher ran, e.g. cancelled by someone else. The files only learn that when a watcher
runs again. When the scheduler cannot be asked, status says so in one line and shows the
files' view; `--offline` never asks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import campaign_done
from throughput_sweep.late_results import WAITING, grace_seconds
from throughput_sweep.locking import probe, watcher_line
from throughput_sweep.schedulers.base import JobStatus, QueryFailed, Scheduler

# Jobs not (known to be) over, besides pending ones: what status adds to "running".
_STILL_OUT = {
    "running": "the scheduler says running",
    "gone": "the scheduler does not know it now",
    "unknown": "the scheduler does not know it now",
}


@dataclass(frozen=True)
class Live:
    driver: str  # how the user runs us (cli.driver_name), for the commands we print
    resume: str  # the command that resumes the campaign
    watcher: str  # one line: is a watcher running
    watcher_alive: bool
    jobs: dict[str, JobStatus] | None  # job id -> the scheduler's state; None: not asked
    note: str = ""  # why the scheduler was not asked, or could not be
    result_grace: float = 0.0  # how long an ended job's result may take to appear (late_results)

    def job_line(self, info: AttemptInfo) -> str:
        """One running attempt as status shows it."""
        rec = info.attempt.receipt
        where = f"batch {info.batch} attempt {info.number}"
        if rec is None:
            return f"running: {where}, intent {info.attempt.token} (not yet settled)"
        status = None if self.jobs is None else self.jobs.get(rec.job_id)
        if status is None:
            return f"running: {where}, job {rec.job_id}"
        if status.pending is not None:
            return f"pending: {where}, job {rec.job_id} ({status.pending.text or 'no reason given'})"
        if status.state in _STILL_OUT:
            return f"running: {where}, job {rec.job_id} ({_STILL_OUT[status.state]})"
        ended = f"ended: {where}, job {rec.job_id} {status.word}"
        if self.watcher_alive and self.result_grace:
            return f"{ended}; {WAITING} (up to {self.result_grace:.0f} s), then the watcher records it"
        if self.watcher_alive:
            return f"{ended}; the watcher records it"
        if status.state == "completed":
            return f"{ended} while no watcher ran; record it with: {self.resume}"
        return f"{ended} while no watcher ran (cancelled or ended by someone else?); retry it with: {self.resume} --retry-failed"

    def summary(self) -> str:
        """'jobs now: 1 running, 2 pending (QOSMaxJobsPerUserLimit)', or why there is none."""
        if self.note:
            return self.note
        if not self.jobs:
            return ""
        counts: Counter[str] = Counter()
        for status in self.jobs.values():
            if status.pending is not None:
                counts[f"pending ({status.pending.text or 'no reason given'})"] += 1
            elif status.state in _STILL_OUT:
                counts["running" if status.state == "running" else "unknown to the scheduler"] += 1
            else:
                counts[f"ended ({status.word})" + ("" if self.watcher_alive else " while no watcher ran")] += 1
        return "jobs now: " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def out_jobs(infos: list[AttemptInfo]) -> list[str]:
    """Job ids that the files say are out: a receipt and no result yet."""
    return [i.job_id for i in infos if i.status == "submitted"]


def ask(campaign: Campaign, driver: str, *, offline: bool, scheduler: Scheduler | None = None) -> Live:
    """The watcher's state and, unless `offline`, one poll of the jobs out (by `scheduler`,
    else the campaign's own, made here)."""

    from throughput_sweep.watcher import resume_command

    resume = resume_command(campaign.root, driver)
    curves = campaign.curves()
    lock = probe(campaign.root)
    alive = lock.held
    watcher = watcher_line(lock, resume, campaign_done(curves))
    if offline:
        return Live(
            driver,
            resume,
            watcher,
            alive,
            None,
            "offline: from the campaign's files alone; the scheduler was not asked",
        )
    ids = out_jobs([i for c in curves for i in c.attempts])
    if not ids:
        return Live(driver, resume, watcher, alive, {})
    try:
        jobs = _poll(campaign, ids, scheduler)
    except QueryFailed as exc:
        note = f"cannot ask the scheduler ({exc}); shown from the campaign's files alone"
        return Live(driver, resume, watcher, alive, None, note)
    return Live(driver, resume, watcher, alive, jobs, result_grace=grace_seconds(campaign.manifest.profile))


def _poll(campaign: Campaign, ids: list[str], scheduler: Scheduler | None) -> dict[str, JobStatus]:
    import anyio

    from throughput_sweep.schedulers import backend

    if scheduler is None:
        profile = campaign.manifest.profile
        scheduler = backend(profile.scheduler).for_status(profile, campaign.root)
    return anyio.run(scheduler.poll, ids)
