"""A job cancelled by someone else (a real scancel on the real Slurm) passes the audit's
state check and is shown as a point to retry, with the command, never as a boundary."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from campaign_helpers import BLOCKED, job_state, profile, start_sweep, sweep, wait_for, write_plan
from throughput_audit.audit import run_audit

pytestmark = pytest.mark.slurm

POINT = "curves/20m-c512/b2/attempt-1"


def test_a_job_scancelled_by_someone_else_is_a_retry_not_a_boundary(local_slurm, tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b2@1": {"outcome": "sleep", "seconds": 3600}})
    out = tmp_path / "camp"
    run = (
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "4",
        "--profile",
        profile(tmp_path),
        "--worker",
        "scripted_worker",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "1",
        "--no-progress",
    )
    proc = start_sweep(*run, plan=plan, log=tmp_path / "watcher.log")
    try:
        receipt = out / POINT / "receipt.json"
        wait_for(receipt.exists, 60, "the receipt of b2")
        job = json.loads(receipt.read_text())["job_id"]
        wait_for(lambda: job_state(job) == "RUNNING", 60, f"job {job} to run")
        time.sleep(2)  # the watchdog has started
        subprocess.run(["scancel", job], check=True)
        assert proc.wait(timeout=240) == BLOCKED, (tmp_path / "watcher.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sweep("collect", "--output", out, plan=plan).returncode == 0

    report = run_audit(out, settle_seconds=20, allow_test_worker=True).report
    assert [c.message for c in report.checks if c.status == "fail"] == []
    (state,) = [c for c in report.checks if c.name == "slurm.state" and c.file == f"{POINT}/receipt.json"]
    assert state.values["state"] == "cancelled" and state.values["outcome"] == "cancelled"
    assert "not a boundary; retry the point with run --resume --retry-failed" in state.message
    (curve,) = report.curves
    assert (curve.state, curve.blocked_batch, curve.first_oom_batch) == ("blocked", 2, None)
    assert curve.blocked_reason.endswith(
        f"ended cancelled by someone else, not a boundary: retry it with "
        f"throughput-sweep run --output {out} --resume --retry-failed"
    )
