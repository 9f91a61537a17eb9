"""The preflight's reading of what sacctmgr and sinfo print (the cluster itself: tests/test_preflight_slurm.py)."""

from __future__ import annotations

import pytest

from throughput_schema import ClusterProfile
from throughput_sweep.schedulers.base import Findings
from throughput_sweep.schedulers.slurm.cluster import _limits, _node_gpus

QOS = ("MaxWall", "MaxTRES", "MaxSubmitPU", "MaxJobsPU")


def _found(**row) -> Findings:
    found = Findings()
    _limits(ClusterProfile(name="p", scheduler="slurm", gpus_per_job=2), "QOS q", row, QOS, found)
    return found


def test_a_maxwall_below_the_time_limit_and_too_few_gpus_are_problems_naming_the_field():
    found = _found(MaxWall="00:05:00", MaxTRES="cpu=64,gres/gpu=1")
    assert found.problems == [
        "profile time_limit_minutes=14 exceeds the MaxWall of QOS q (5 minutes): lower it (and watchdog_minutes) or use another account or QOS",
        "profile gpus_per_job=2 exceeds the MaxTRESPerJob of QOS q (gres/gpu=1): lower it or use another account or QOS",
    ]
    assert found.notes == []


def test_limits_that_admit_the_job_say_nothing():
    assert _found(MaxWall="1-00:00:00", MaxTRES="gres/gpu=8", MaxSubmitPU="100", MaxJobsPU="12") == Findings()
    assert _found() == Findings()


@pytest.mark.parametrize("key, name", [("MaxSubmitPU", "MaxSubmitJobsPerUser"), ("MaxJobsPU", "MaxJobsPerUser")])
def test_a_count_below_the_cap_is_a_note_and_zero_is_a_problem(key, name):
    assert _found(**{key: "3"}).notes[0].startswith(f"QOS q has {name}=3, below the profile's max_concurrent_jobs=12: ")
    assert _found(**{key: "0"}).problems == [f"QOS q has {name}=0: no job of it can run; use another account or QOS"]


@pytest.mark.parametrize(
    "gres, gpus",
    [("gpu:16", 16), ("gpu:h100:4(S:0-1)", 4), ("gpu:a100:2,gpu:v100:1", 3), ("shard:8,gpu:4", 4), ("(null)", 0)],
)
def test_the_gpus_of_a_node_are_read_from_its_gres(gres, gpus):
    assert _node_gpus(gres) == gpus
