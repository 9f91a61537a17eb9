"""A job preempted by another user's higher-priority job, on the real Slurm.

The local Slurm's partition `urgent` (PriorityTier=10, PreemptType=preempt/partition_prio,
PreemptMode=CANCEL) takes the node from the campaign's `gpu` jobs. The point is shown as
preempted, blocks its curve without setting a boundary, `--resume --retry-failed`
finishes it, and the audit accepts Slurm's PREEMPTED state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    BLOCKED,
    ROOT,
    check_campaign,
    job_state,
    profile,
    receipts,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_exclusive, pytest.mark.slow]

POINT = Path("curves/20m-c512/b2/attempt-1")


def test_a_preempted_point_blocks_its_curve_and_retries_without_a_boundary(local_slurm, tmp_path):
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2@1": {"outcome": "sleep", "seconds": 300}})
    out = tmp_path / "camp"
    log = tmp_path / "run.log"
    watcher = start_sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--profile",
        profile(tmp_path, time_limit_minutes=6, watchdog_minutes=5),
        "--worker",
        "scripted_worker",
        "--max-batch",
        "4",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "1",
        "--no-progress",
        plan=plan,
        log=log,
    )
    urgent = ""
    try:
        job = wait_for(
            lambda: (
                (out / POINT / "receipt.json").exists()
                and json.loads((out / POINT / "receipt.json").read_text())["job_id"]
            ),
            timeout=120,
            what="the batch-2 job",
        )
        wait_for(lambda: job_state(job) == "RUNNING", timeout=60, what="the batch-2 job to run")
        # Another user's urgent job needs the whole node: Slurm cancels ours to make room.
        urgent = (
            subprocess.run(
                [
                    "sbatch",
                    "--parsable",
                    "--partition=urgent",
                    "--exclusive",
                    "--time=1",
                    "--output=/dev/null",
                    "--wrap=sleep 2",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
            .stdout.strip()
            .split(";")[0]
        )
        assert watcher.wait(timeout=180) == BLOCKED, log.read_text()
    finally:
        watcher.kill()
    wait_for(lambda: not job_state(urgent), timeout=120, what="the urgent job to end")
    receipt = json.loads((out / POINT / "receipt.json").read_text())
    assert receipt["accounting"]["state"] == "preempted", receipt["accounting"]
    result = json.loads((out / POINT / "result.json").read_text())
    assert result["outcome"]["kind"] != "cuda_oom"

    status = sweep("status", "--output", out, "--offline", plan=plan)
    assert status.returncode == BLOCKED, status.stdout + status.stderr
    assert "preempted" in status.stdout.lower(), status.stdout
    assert "--retry-failed" in status.stdout, status.stdout

    r = sweep(
        "run", "--output", out, "--resume", "--retry-failed", "--poll-max-seconds", "1", "--no-progress", plan=plan
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert check_campaign(out, since) == {"20m-c512": "capped"}
    assert len(receipts(out)) == 4  # batches 1, 2 (preempted), 2 again, 4
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    audit = subprocess.run(
        [sys.executable, str(ROOT / "scripts/throughput_audit.py"), "--output", str(out), "--allow-test-worker"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
