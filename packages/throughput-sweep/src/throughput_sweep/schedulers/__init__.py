"""Schedulers behind one small interface, one module (Slurm's: one package) each, found by name in `BACKENDS`.

`backend(name)` is the class of the backend a scheduler name stands for (`base.Backend`:
what the campaign asks of it before any job); `make_scheduler(profile, campaign)` builds
the scheduler `profile.scheduler` names, through its `for_campaign`: `SlurmScheduler`, or
`LocalScheduler` (whose job registry lives in `<campaign>/.local-jobs/`). Both expose
`slots`. The names themselves are listed in `throughput_schema.scheduler_names`;
`BACKENDS.check()` refuses a listed name without a backend here. `detected()` is what
every backend finds from this machine (`Backend.detect`), for the choice of a profile.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from throughput_schema import ClusterProfile
from throughput_schema.scheduler_names import SchedulerParts
from throughput_sweep.schedulers.base import Backend, JobStatus, QueryFailed, Scheduler, SubmitFailed

__all__ = ["BACKENDS", "JobStatus", "QueryFailed", "Scheduler", "SubmitFailed", "backend", "detected", "make_scheduler"]


def _slurm() -> type[Backend]:
    from throughput_sweep.schedulers.slurm.backend import SlurmScheduler

    return SlurmScheduler


def _local() -> type[Backend]:
    from throughput_sweep.schedulers.local import LocalScheduler

    return LocalScheduler


# Each backend's module is imported only when a campaign uses it.
BACKENDS: SchedulerParts[Callable[[], type[Backend]]] = SchedulerParts(
    "backend in the sweep", {"slurm": _slurm, "local": _local}
)


def backend(name: str) -> type[Backend]:
    return BACKENDS.get(name)()


def make_scheduler(profile: ClusterProfile, campaign: str | Path, **kwargs: Any) -> Scheduler:
    return backend(profile.scheduler).for_campaign(profile, Path(campaign), **kwargs)


def detected() -> list[str]:
    """Each scheduler found from here, in its backend's words (`Backend.detect`)."""
    return [found for name in BACKENDS.parts if (found := backend(name).detect())]
