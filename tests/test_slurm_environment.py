"""The client's environment is ours: inherited SBATCH_*/SLURM_* variables and a user's
SLURM_TIME_FORMAT change neither the jobs nor what the watcher reads (real local Slurm)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from datetime import datetime

import anyio
import msgspec
import pytest
import yaml

from campaign_helpers import ROOT, profile, receipts, sweep, write_plan
from throughput_schema import ClusterProfile
from throughput_slurm.sacct import raw_row
from throughput_sweep.schedulers.base import QueryFailed
from throughput_sweep.schedulers.slurm.backend import SlurmScheduler

pytestmark = pytest.mark.slurm

# What a user's shell inside an allocation (salloc, an interactive srun) may hold.
INHERITED = {
    "SBATCH_TIMELIMIT": "00:01:00",
    "SBATCH_QOS": "nosuch",
    "SLURM_TIME_FORMAT": "relative",
    "SLURM_JOB_ID": "4242424",
    "SLURM_ENCLOSING_ALLOCATION_MARK": "from-the-shell",
}
# A full date and time, in UTC with its offset (the queries run with TZ=UTC).
FULL_DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")


@pytest.fixture
def inherited(monkeypatch):
    for name, value in INHERITED.items():
        monkeypatch.setenv(name, value)


def _clean() -> dict[str, str]:
    """The test's own environment, for its own sacct calls."""
    return {k: v for k, v in os.environ.items() if k not in INHERITED}


def test_the_job_gets_the_profiles_settings_and_none_of_the_shells_slurm_variables(local_slurm, inherited, tmp_path):
    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    prof = msgspec.convert({**raw, "time_limit_minutes": 2, "watchdog_minutes": 1}, ClusterProfile)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nenv > {tmp_path}/job-env.txt\n")

    async def main():
        sched = SlurmScheduler(prof)
        job_id = await sched.submit(script, token=f"tst-{uuid.uuid4().hex[:12]}", workdir=tmp_path)
        with anyio.fail_after(60):
            while True:
                status = (await sched.poll([job_id]))[job_id]
                if status.finished and status.accounting_final:
                    return sched, job_id, status
                await anyio.sleep(0.5)

    sched, job_id, status = anyio.run(main)
    assert status.state == "completed"
    env = dict(line.split("=", 1) for line in (tmp_path / "job-env.txt").read_text().splitlines() if "=" in line)
    assert env["SLURM_JOB_ID"] == job_id  # the job's own, not the enclosing allocation's
    assert "SLURM_ENCLOSING_ALLOCATION_MARK" not in env
    assert not [k for k in env if k.startswith("SBATCH_")]
    assert sched.removed == INHERITED
    # The profile's time limit and the association's QOS, not SBATCH_TIMELIMIT or SBATCH_QOS.
    row = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "--format=QOS,Timelimit,Start"],
        capture_output=True,
        text=True,
        check=True,
        env=_clean(),
    ).stdout.split("|")
    assert row[:2] == ["normal", "00:02:00"]
    row = raw_row(status.accounting.raw)
    assert row.timelimit == "00:02:00"
    assert FULL_DATE.match(row.start), row.start


def test_a_campaign_in_an_inherited_shell_runs_on_its_profile_and_records_what_was_removed(
    local_slurm, inherited, tmp_path
):
    out = tmp_path / "camp"
    r = sweep(
        "run",
        "--output",
        out,
        "--profile",
        profile(tmp_path),
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "2",
        "--worker",
        "scripted_worker",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "1",
        "--no-progress",
        plan=write_plan(tmp_path, {}),
    )
    assert r.returncode == 0, r.stderr
    assert "[sweep] kept from Slurm and its jobs: SBATCH_QOS, SBATCH_TIMELIMIT, " in r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scheduler_environment_removed"] == INHERITED
    jobs = receipts(out)
    assert len(jobs) == 2
    for receipt in jobs:
        acct = receipt["accounting"]
        assert FULL_DATE.match(acct["start"]) and FULL_DATE.match(acct["end"]), acct
        assert acct["time_limit_seconds"] == 120
        row = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", receipt["job_id"], "--format=QOS,Timelimit"],
            capture_output=True,
            text=True,
            check=True,
            env=_clean(),
        ).stdout.strip()
        assert row == "normal|00:02:00"


def test_sacct_that_exits_0_but_reports_an_error_is_a_failed_query(local_slurm, tmp_path):
    """Slurm before 23.11.4 exits 0 when slurmdbd is down; the real sacct, pointed at a port
    where no slurmdbd listens, prints that error, and the wrapper exits 0 as those versions do."""
    etc = tmp_path / "etc"
    shutil.copytree(local_slurm.slurm_conf.parent, etc)
    conf = etc / "slurm.conf"
    text = re.sub(r"(?m)^AccountingStoragePort=.*\n", "", conf.read_text())
    conf.write_text(text + "AccountingStoragePort=1\n")
    wrapper = tmp_path / "sacct"
    wrapper.write_text(f'#!/bin/sh\nSLURM_CONF={conf} {shutil.which("sacct")} "$@"\nexit 0\n')
    wrapper.chmod(0o755)
    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    sched = SlurmScheduler(msgspec.convert(raw, ClusterProfile), commands={"sacct": str(wrapper)})

    async def main():
        return await sched.find_by_token([f"tst-{uuid.uuid4().hex[:12]}"], datetime.now())

    # Read as "no such job", the token's intent would be settled as never submitted and resubmitted.
    with pytest.raises(QueryFailed, match=r"sacct exit 0 with an error: .*Connection refused"):
        anyio.run(main)
