"""Schedulers behind one small interface, one module each, found by name in `BACKENDS`.

`make_scheduler(profile, campaign)` builds the backend `profile.scheduler` names:
`SlurmScheduler(profile)` or `LocalScheduler.for_campaign(profile, campaign)` (whose job
registry lives in `<campaign>/.local-jobs/`). Both expose `slots`. The names themselves
are listed in `throughput_schema.scheduler_names`; `BACKENDS.check()` refuses a listed name
without a backend here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from throughput_schema import ClusterProfile
from throughput_schema.scheduler_names import SchedulerParts
from throughput_sweep.schedulers.base import JobStatus, QueryFailed, Scheduler, SubmitFailed

__all__ = ["BACKENDS", "JobStatus", "QueryFailed", "Scheduler", "SubmitFailed", "make_scheduler"]

Backend = Callable[..., Scheduler]


def _slurm(profile: ClusterProfile, campaign: Path, **kwargs: Any) -> Scheduler:
    from throughput_sweep.schedulers.slurm import SlurmScheduler

    return SlurmScheduler(profile, **kwargs)


def _local(profile: ClusterProfile, campaign: Path, **kwargs: Any) -> Scheduler:
    from throughput_sweep.schedulers.local import LocalScheduler

    return LocalScheduler.for_campaign(profile, campaign, **kwargs)


# Each backend is imported only when a campaign uses it: the local machine has no sbatch.
BACKENDS: SchedulerParts[Backend] = SchedulerParts("backend in the sweep", {"slurm": _slurm, "local": _local})


def make_scheduler(profile: ClusterProfile, campaign: str | Path, **kwargs: Any) -> Scheduler:
    return BACKENDS.get(profile.scheduler)(profile, Path(campaign), **kwargs)
