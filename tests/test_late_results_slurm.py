"""A result that the login node sees late is never lost (real Slurm, scripted worker).

On a shared filesystem the login node may see a compute node's result.json a minute after
the scheduler reports the job ended. Here the test plays that filesystem: once the job's
watchdog has recorded the worker's result (its "done:" line), the file is moved out of the
attempt folder, and it is put back only after the watcher has said it waits for it. The
job's Python lingers a few seconds after the watchdog (a wrapper named as the profile's
`python`), so the file is gone before Slurm reports the job ended: the watcher must wait
(`result_grace_seconds`), then keep the worker's record, not derive a "crashed" one.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import check_campaign, finish, profile, scripted_run, start_sweep, sweep, write_plan

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411, pytest.mark.slow]

WAITING = "waiting for the result to appear"


def lingering_python(tmp_path: Path, seconds: float) -> Path:
    """The compute Python, staying this long after its program ended (the job ends later)."""
    path = tmp_path / "python-lingering"
    path.write_text(f'#!/bin/bash\n"{sys.executable}" "$@"\nrc=$?\nsleep {seconds}\nexit $rc\n')
    path.chmod(0o755)
    return path


def play_late_filesystem(attempt: Path, watcher_log: Path, seen: dict) -> None:
    """Hide attempt/result.json from the watcher once the watchdog is done with it; show it
    again a few seconds after the watcher said it waits for it."""
    deadline = time.monotonic() + 240
    result, hidden = attempt / "result.json", attempt.parent / ".result-on-the-compute-node.json"
    while time.monotonic() < deadline:
        logs = list(attempt.glob("slurm-*.out"))
        if logs and "] done: " in logs[0].read_text(errors="replace") and result.exists():
            os.rename(result, hidden)
            seen["hidden_at"] = time.monotonic()
            break
        time.sleep(0.01)
    while time.monotonic() < deadline and "hidden_at" in seen:
        if WAITING in watcher_log.read_text(errors="replace"):
            time.sleep(5)  # the watcher polls on, with no result in sight
            os.rename(hidden, result)
            seen["shown_at"] = time.monotonic()
            return
        time.sleep(0.1)


def test_a_result_seen_late_is_kept_not_replaced(local_slurm, tmp_path):
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {})
    out = tmp_path / "camp"
    prof = profile(tmp_path, python=str(lingering_python(tmp_path, 3)), result_grace_seconds=60)
    log = tmp_path / "watcher.log"
    attempt = out / "curves/20m-c512/b1/attempt-1"
    seen: dict = {}
    player = threading.Thread(target=play_late_filesystem, args=(attempt, log, seen), daemon=True)
    player.start()
    proc = start_sweep(*scripted_run(out, 512, max_batch=2, profile=prof), plan=plan, log=log)
    assert finish(proc) == 0, log.read_text()
    player.join(timeout=5)
    said = log.read_text()
    assert "hidden_at" in seen and "shown_at" in seen, said
    assert WAITING in said and "up to 60 s" in said, said

    result = json.loads((attempt / "result.json").read_text())
    assert result["outcome"]["kind"] == "ok"
    assert result["worker"]["written_by"] == "worker"
    assert check_campaign(out, since) == {"20m-c512": "capped"}
    assert sweep("collect", "--output", out, plan=plan).returncode == 0

    from throughput_audit.audit import run_audit

    report = run_audit(out, settle_seconds=20, allow_test_worker=True).report
    assert [c.message for c in report.checks if c.status == "fail"] == []
