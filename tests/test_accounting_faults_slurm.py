"""Slurm forgetting a campaign's jobs, against the real local Slurm (tools/local-slurm.sh) with
the scripted worker: slurmdbd down while jobs end, squeue purging finished jobs (MinJobAge),
and both at once. Each case ends in `check_campaign`; the daemons and the config are always
restored, so later tests find Slurm healthy.
"""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    BLOCKED,
    WATCH,
    check_campaign,
    daemon_stopped,
    finish,
    profile,
    receipts,
    result_kind,
    sacct_answers,
    scripted_run,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_exclusive, pytest.mark.slow]


@pytest.mark.slurm2411
def test_slurmdbd_down_while_jobs_end(local_slurm, tmp_path):
    """sacct fails while jobs end: squeue still says how they ended, the curve goes on, and the
    final accounting is added to every receipt once slurmdbd is back (not given up)."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2": "crash"}, ok_seconds=0.5)
    out = tmp_path / "camp"
    # The watcher waits accounting_grace_seconds for a late row, ten times that for a missing one:
    # down for 23 s, sacct is down past the first (20 s) and back well within the second (200 s,
    # counted from the first job's end: on a loaded machine the four results alone took a minute,
    # and slurmctld hands slurmdbd the jobs' records only some time after it is back).
    prof = profile(tmp_path, accounting_grace_seconds=20)
    with daemon_stopped("slurmdbd"):
        proc = start_sweep(
            *scripted_run(out, 512, 1024, max_batch=2, profile=prof), plan=plan, log=tmp_path / "watcher.log"
        )
        try:
            wait_for(lambda: len(list(out.glob("curves/*/b*/attempt-*/result.json"))) >= 4, 60, "four results")
            time.sleep(23)
            if not sacct_answers():  # (another test session's fixture may have restarted it)
                assert proc.poll() is None, (tmp_path / "watcher.log").read_text()
        except BaseException:
            proc.kill()
            raise
    assert finish(proc) == BLOCKED, (tmp_path / "watcher.log").read_text()
    assert check_campaign(out, since) == {"20m-c512": "blocked", "20m-c1024": "capped"}
    for receipt in receipts(out):
        assert receipt["accounting_final"] and receipt["accounting"]["state"] in ("completed", "failed"), receipt


def wait_until_squeue_forgets(job_id: str) -> None:
    def forgotten() -> bool:
        return "Invalid job id" in subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stderr

    wait_for(forgotten, 60, f"squeue to forget {job_id}")


@contextmanager
def min_job_age(seconds: int, conf: Path):
    """squeue forgets finished jobs after `seconds` (MinJobAge), through `scontrol reconfigure`."""
    original = conf.read_text()
    conf.write_text(original.replace("MinJobAge=300", f"MinJobAge={seconds}"))
    try:
        subprocess.run(["scontrol", "reconfigure"], check=True)
        yield
    finally:
        conf.write_text(original)
        subprocess.run(["scontrol", "reconfigure"], check=True)


@pytest.mark.slurm2411
def test_squeue_forgets_finished_jobs(local_slurm, tmp_path):
    """With MinJobAge=2 squeue purges finished jobs at once; a job that ended while the watcher
    was dead, and is gone from squeue, is found in sacct on --resume (never taken as lost)."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2": "crash"})
    out = tmp_path / "camp"
    args = scripted_run(out, 512, max_batch=4, profile=profile(tmp_path))
    with min_job_age(2, local_slurm.slurm_conf):
        r = sweep(*args, plan=plan, crash="after-receipt@2")
        assert r.returncode == -9, r.stderr
        job_id = json.loads((out / "curves/20m-c512/b2/attempt-1/receipt.json").read_text())["job_id"]
        wait_until_squeue_forgets(job_id)
        r = sweep("run", "--output", out, "--resume", *WATCH, plan=plan)
        assert r.returncode == BLOCKED, r.stderr
    assert check_campaign(out, since) == {"20m-c512": "blocked"}
    assert result_kind(out, "20m-c512", 2) == "crashed"
    accounting = {r["job_id"]: r["accounting"] for r in receipts(out)}
    assert accounting[job_id]["state"] == "failed"


@pytest.mark.slurm2411
def test_a_job_purged_from_squeue_while_slurmdbd_is_down_is_settled_from_its_files(local_slurm, tmp_path):
    """slurmdbd is down and squeue forgets finished jobs at once (MinJobAge=2): a job that ended
    while no watcher ran leaves no trace in Slurm. The resumed watcher settles it from its
    result.json after its grace, frees its slot, finishes the curve and says in the receipt
    that the accounting is missing, instead of waiting on an UNKNOWN job forever."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {}, ok_seconds=0.5)
    out = tmp_path / "camp"
    grace = ["--accounting-grace-seconds", "5"]
    args = scripted_run(out, 512, max_batch=2, profile=profile(tmp_path))
    with min_job_age(2, local_slurm.slurm_conf), daemon_stopped("slurmdbd"):
        r = sweep(*args, *grace, plan=plan, crash="after-receipt@2")
        assert r.returncode == -9, r.stderr
        attempt = out / "curves/20m-c512/b2/attempt-1"
        job_id = json.loads((attempt / "receipt.json").read_text())["job_id"]
        wait_for((attempt / "result.json").exists, 60, f"job {job_id}'s result")
        wait_until_squeue_forgets(job_id)
        assert not sacct_answers()
        r = sweep("run", "--output", out, "--resume", *WATCH, *grace, plan=plan)
        assert r.returncode == 0, r.stderr
        assert f"job {job_id}: Slurm's accounting was not available" in r.stderr, r.stderr
        assert "settled from result.json" in r.stderr
    states = check_campaign(out, since)
    assert states == {"20m-c512": "capped"}
    missing = {r["job_id"]: r.get("accounting_missing", "") for r in receipts(out)}
    assert "settled from result.json" in missing[job_id], missing
