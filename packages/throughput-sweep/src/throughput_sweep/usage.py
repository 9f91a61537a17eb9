"""What a campaign has used of the cluster so far: GPU-hours, from its receipts.

Each receipt's accounting row (sacct's, or the local job registry's for the local
scheduler) gives the job's Elapsed; the GPUs are the row's `gres/gpu` in AllocTRES, what the
scheduler really allocated, else the profile's `gpus_per_job`. A job without an accounting
row yet (still out, or ended while no watcher ran) is counted as not yet known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from throughput_schema import AccountingRow, ClusterProfile
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.schedulers.slurm_text import slurm_minutes

_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


@dataclass(frozen=True)
class GpuHours:
    hours: float
    jobs: int  # jobs whose elapsed time is counted
    unknown: int  # jobs with a receipt but no elapsed time yet
    source: str  # where the times come from

    def line(self) -> str:
        if not self.jobs and not self.unknown:
            return "GPU-hours so far: 0 (no job has been accepted)"
        later = f"; {self.unknown} job(s) not counted yet (no accounting recorded)" if self.unknown else ""
        return f"GPU-hours so far: {self.hours:.2f} over {self.jobs} job(s) (elapsed times GPUs, from {self.source}){later}"


def job_gpus(row: AccountingRow, profile: ClusterProfile) -> int:
    found = _GPUS.search(row.alloc_tres)
    return int(found.group(1)) if found else profile.gpus_per_job


def elapsed_hours(row: AccountingRow) -> float | None:
    """sacct's Elapsed ([D-]HH:MM:SS) in hours; None when it is missing or unreadable."""
    try:
        minutes = slurm_minutes(row.elapsed)
    except ValueError:
        return None
    return None if minutes is None else minutes / 60.0


def gpu_hours(infos: list[AttemptInfo], profile: ClusterProfile) -> GpuHours:
    hours, jobs, unknown = 0.0, 0, 0
    for info in infos:
        receipt = info.attempt.receipt
        if receipt is None:
            continue
        elapsed = elapsed_hours(receipt.accounting) if receipt.accounting is not None else None
        if elapsed is None or receipt.accounting is None:  # no accounting, no elapsed time
            unknown += 1
            continue
        hours += elapsed * job_gpus(receipt.accounting, profile)
        jobs += 1
    source = "the local job registry" if profile.scheduler == "local" else "sacct's Elapsed"
    return GpuHours(hours=hours, jobs=jobs, unknown=unknown, source=source)
