"""The scheduler names are listed once; records and each package's parts are held to the list."""

from __future__ import annotations

import pytest

from throughput_schema import ClusterProfile, SchemaError, convert_input, scheduler_names
from throughput_schema.scheduler_names import SchedulerParts, UnknownScheduler


def test_a_profile_names_only_a_listed_scheduler(monkeypatch):
    with pytest.raises(SchemaError, match="scheduler 'pbs' is not one of: slurm, local"):
        convert_input({"name": "x", "scheduler": "pbs"}, ClusterProfile)
    monkeypatch.setattr(scheduler_names, "SCHEDULER_NAMES", (*scheduler_names.SCHEDULER_NAMES, "pbs"))
    assert convert_input({"name": "x", "scheduler": "pbs"}, ClusterProfile).scheduler == "pbs"


def test_parts_are_refused_for_a_missing_or_an_unlisted_name():
    with pytest.raises(UnknownScheduler, match="scheduler 'local' has no backend in the sweep"):
        SchedulerParts("backend in the sweep", {"slurm": 1}).check()
    with pytest.raises(UnknownScheduler, match="scheduler 'pbs' is not one of"):
        SchedulerParts("backend in the sweep", {"slurm": 1, "local": 2, "pbs": 3}).check()
    with pytest.raises(UnknownScheduler, match="scheduler 'pbs' is not one of"):
        SchedulerParts("backend in the sweep", {"slurm": 1, "local": 2}).get("pbs")
