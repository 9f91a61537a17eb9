"""Schedulers behind one small interface: Slurm and the local machine.

`make_scheduler(profile, campaign)` picks the backend from `profile.scheduler`:
`SlurmScheduler(profile)` or `LocalScheduler.for_campaign(profile, campaign)` (whose job
registry lives in `<campaign>/.local-jobs/`). Both expose `slots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from throughput_schema import ClusterProfile
from throughput_sweep.schedulers.base import JobStatus, QueryFailed, Scheduler, SubmitFailed

__all__ = ["JobStatus", "QueryFailed", "Scheduler", "SubmitFailed", "make_scheduler"]


def make_scheduler(profile: ClusterProfile, campaign: str | Path, **kwargs: Any) -> Scheduler:
    if profile.scheduler == "slurm":
        from throughput_sweep.schedulers.slurm import SlurmScheduler

        return SlurmScheduler(profile, **kwargs)
    from throughput_sweep.schedulers.local import LocalScheduler

    return LocalScheduler.for_campaign(profile, campaign, **kwargs)
