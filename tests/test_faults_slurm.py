"""Fault injection against the real local Slurm (tools/local-slurm.sh) with the scripted worker.

Every case ends in `check_campaign`: no point has two jobs in sacct, every finished job has
its result.json, and only a `cuda_oom` result ever sets a curve's memory boundary. Daemons,
the node and the config are always restored in `finally`, so later tests find Slurm healthy.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    check_campaign,
    intents,
    job_state,
    local_slurm,
    profile,
    receipts,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLEEP = {"outcome": "sleep", "seconds": 3600}
FAST = ["--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "2", "--no-progress"]
NODE = socket.gethostname().split(".")[0]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def running_job(out: Path, curve: str, batch: int, attempt: int = 1) -> str:
    """Wait until the point's job runs under Slurm (and its watchdog had a moment to start)."""
    path = out / f"curves/{curve}/b{batch}/attempt-{attempt}/receipt.json"
    wait_for(path.exists, 60, f"the receipt of {curve} b{batch}")
    job_id = json.loads(path.read_text())["job_id"]
    wait_for(lambda: job_state(job_id) == "RUNNING", 60, f"job {job_id} to run")
    time.sleep(2)
    return job_id


def finish(proc: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def result_kind(out: Path, curve: str, batch: int, attempt: int = 1) -> str:
    return json.loads((out / f"curves/{curve}/b{batch}/attempt-{attempt}/result.json").read_text())["outcome"]["kind"]


@contextmanager
def daemon_stopped(name: str):
    local_slurm("stop-daemon", name)
    try:
        yield
    finally:
        local_slurm("start-daemon", name)
        local_slurm("start")


# --------------------------------------------------------------------------- the cases


def test_scancel_kill_mid_result_second_watcher_and_collect_crash(local_slurm, tmp_path):
    """scancel by hand -> cancelled (blocks); a job SIGKILLed whole leaves no result and the
    watcher, SIGKILLed while writing the derived one, writes it on --resume; a second watcher
    on the running campaign refuses; a collect SIGKILLed half-way is simply run again."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2@1": SLEEP, "20m-c1024-b2@1": SLEEP})
    out = tmp_path / "camp"
    args = ["run", "--output", out, "--models", "20m", "--contexts", "512", "1024", "--max-batch", "4",
            "--profile", profile(tmp_path), *FAST]
    proc = start_sweep(*args, plan=plan, log=tmp_path / "watcher.log", crash="while-result")
    try:
        cancelled = running_job(out, "20m-c512", 2)
        killed = running_job(out, "20m-c1024", 2)
        second = sweep("run", "--output", out, "--resume", *FAST, plan=plan)
        assert second.returncode == 2 and "another watcher" in one_line(second.stderr)
        subprocess.run(["scancel", cancelled], check=True)
        subprocess.run(["scancel", "--batch", "--signal=KILL", killed], check=True)
        assert finish(proc) == -9, (tmp_path / "watcher.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(out.glob("curves/20m-c1024/b2/attempt-1/.result.json.crash.tmp"))
    assert not (out / "curves/20m-c1024/b2/attempt-1/result.json").exists()
    r = sweep("run", "--output", out, "--resume", *FAST, plan=plan)
    assert r.returncode == 0, r.stderr
    assert result_kind(out, "20m-c512", 2) == "cancelled"
    assert result_kind(out, "20m-c1024", 2) == "crashed"
    assert check_campaign(out, since) == {"20m-c512": "blocked", "20m-c1024": "blocked"}
    r = sweep("collect", "--output", out, plan=plan, crash="while-collect")
    assert r.returncode == -9 and not (out / "results.json").exists()
    r = sweep("collect", "--output", out, plan=plan)
    assert r.returncode == 0, r.stderr
    summary = {c["curve"]: c for c in json.loads((out / "results.json").read_text())["curves"]}
    assert all(c["first_oom_batch"] is None for c in summary.values())
