"""A compute node whose clock is off from slurmctld's (real Slurm, scripted worker).

The job's Python runs under libfaketime (a profile's `python` wrapper), so the watchdog and
the worker read a clock 90 s ahead of, or behind, the one slurmctld stamps Start and End
with. The audit measures the node's skew from the watchdog's start against each job's Start,
compares the workers' times after removing it, and passes; a skew beyond its bound fails
`slurm.clock_skew` alone, naming the node.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import check_campaign, profile, scripted_run, sweep, write_plan

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411, pytest.mark.slow]


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")  # Debian's libfaketime


def skewed_python(tmp_path: Path, offset: str) -> Path:
    """The compute Python with libfaketime preloaded. The library is copied beside the test,
    since Slurm 24.11's jobs run in its own root, which shares /tmp but not /usr."""
    if not LIBFAKETIME.exists():
        if os.environ.get("CI"):
            pytest.fail("libfaketime is not installed; .ci/run installs it (apt-get install faketime)")
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    lib = tmp_path / LIBFAKETIME.name
    shutil.copy(LIBFAKETIME, lib)
    path = tmp_path / f"python{offset}"
    path.write_text(f'#!/bin/bash\nLD_PRELOAD="{lib}" FAKETIME="{offset}" exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("offset, within", [("+90", True), ("-90", True), ("+400", False)])
def test_a_node_clock_off_by_minutes_is_measured_and_removed(local_slurm, tmp_path, offset, within):
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {})
    out = tmp_path / "camp"
    prof = profile(tmp_path, python=str(skewed_python(tmp_path, offset)))
    run = sweep(*scripted_run(out, 512, max_batch=2, profile=prof), plan=plan)
    assert run.returncode == 0, run.stdout + run.stderr
    assert check_campaign(out, since) == {"20m-c512": "capped"}
    assert sweep("collect", "--output", out, plan=plan).returncode == 0

    from throughput_audit.audit import run_audit

    checks = run_audit(out, settle_seconds=20, allow_test_worker=True).report.checks
    skews = [c for c in checks if c.name == "slurm.clock_skew"]
    assert len(skews) == 1, [c.message for c in checks]
    skew = skews[0].values["skew_seconds"]
    # The node's offset, plus the moment the batch script took to start the watchdog.
    assert 0 <= skew - int(offset) < 5, skews[0].message
    ahead = "ahead of" if int(offset) > 0 else "behind"
    assert f"its clock reads {abs(skew):.1f} s {ahead} sacct's" in skews[0].message
    times = [c for c in checks if c.name == "slurm.worker_times"]
    assert len(times) == 2 and all(c.status == "pass" for c in times), [c.message for c in times]
    failed = [(c.name, c.message) for c in checks if c.status == "fail"]
    if within:
        assert failed == []
    else:
        assert [name for name, _ in failed] == ["slurm.clock_skew"]
        assert "beyond what the audit accepts" in failed[0][1] and "(bound 300 s)" in failed[0][1]
