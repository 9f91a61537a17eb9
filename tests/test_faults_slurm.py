"""Fault injection against the real local Slurm (tools/local-slurm.sh) with the scripted worker.

Every case ends in `check_campaign`: no point has two jobs in sacct, every finished job has
its result.json, and only a `cuda_oom` result ever sets a curve's memory boundary. Daemons,
the node and the config are always restored in `finally`, so later tests find Slurm healthy.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    BLOCKED,
    FAST,
    WATCH,
    check_campaign,
    daemon_stopped,
    finish,
    intents,
    job_state,
    profile,
    result_kind,
    scripted_run,
    slurm_tool,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLEEP = {"outcome": "sleep", "seconds": 3600}
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


# --------------------------------------------------------------------------- the cases


@pytest.mark.slurm2411
def test_scancel_kill_mid_result_second_watcher_and_collect_crash(local_slurm, tmp_path):
    """scancel by hand -> cancelled (blocks); a job SIGKILLed whole leaves no result and the
    watcher, SIGKILLed while writing the derived one, writes it on --resume; a second watcher
    on the running campaign refuses; a collect SIGKILLed half-way is simply run again."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2@1": SLEEP, "20m-c1024-b2@1": SLEEP})
    out = tmp_path / "camp"
    args = scripted_run(out, 512, 1024, max_batch=4, profile=profile(tmp_path))
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
    assert r.returncode == BLOCKED, r.stderr
    assert result_kind(out, "20m-c512", 2) == "cancelled"
    assert result_kind(out, "20m-c1024", 2) == "crashed"
    assert check_campaign(out, since) == {"20m-c512": "blocked", "20m-c1024": "blocked"}
    r = sweep("collect", "--output", out, plan=plan, crash="while-collect")
    assert r.returncode == -9 and not (out / "results.json").exists()
    r = sweep("collect", "--output", out, plan=plan)
    assert r.returncode == 0, r.stderr
    summary = {c["curve"]: c for c in json.loads((out / "results.json").read_text())["curves"]}
    assert all(c["first_oom_batch"] is None for c in summary.values())


@pytest.mark.slurm2411
@pytest.mark.slurm_exclusive
def test_slurmctld_down_for_a_minute_with_a_submission_during_it(local_slurm, tmp_path):
    """The controller is stopped while a job runs; the job's result lands, the next sbatch fails
    (transiently) while it is down; once it is back the failed intent is settled by token and
    the curve goes on: nothing blocked, nothing submitted twice."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b1": {"outcome": "sleep", "seconds": 3, "then": "ok"}})
    out = tmp_path / "camp"
    proc = start_sweep(
        *scripted_run(out, 512, max_batch=4, profile=profile(tmp_path)), plan=plan, log=tmp_path / "watcher.log"
    )
    try:
        running_job(out, "20m-c512", 1)
        with daemon_stopped("slurmctld"):
            wait_for((out / "curves/20m-c512/b2/attempt-1/intent.json").exists, 30, "a submission while down")
            time.sleep(55)  # the minute docs/reliability.md promises to ride out
            assert proc.poll() is None, (tmp_path / "watcher.log").read_text()
        assert finish(proc) == 0, (tmp_path / "watcher.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "watcher.log").read_text()
    assert "Unable to contact slurm controller" in log
    assert check_campaign(out, since) == {"20m-c512": "capped"}
    settled = json.loads((out / "curves/20m-c512/b2/attempt-1/settlement.json").read_text())
    assert settled["state"] == "never-submitted"
    assert result_kind(out, "20m-c512", 2, attempt=2) == "ok"


@pytest.mark.slurm2411
def test_sbatch_refused_for_good_blocks_with_one_clear_message(local_slurm, tmp_path):
    """A partition that does not exist: every curve is refused once with Slurm's own words, the
    watcher ends (no retry storm) and no job reaches the accounting."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {})
    out = tmp_path / "camp"
    bad = profile(tmp_path, partition="nosuchpartition")
    r = sweep(*scripted_run(out, 512, 1024, profile=bad), "--no-preflight", plan=plan, timeout=120)
    assert r.returncode == BLOCKED, r.stderr
    assert "Invalid partition name specified" in r.stderr
    assert check_campaign(out, since) == {"20m-c512": "blocked", "20m-c1024": "blocked"}
    assert {k: len(v) for k, v in intents(out).items()} == {("20m-c512", 1): 1, ("20m-c1024", 1): 1}
    status = sweep("status", "--output", out).stdout
    assert status.count("sbatch refused the job") >= 2 and "Invalid partition" in status


@pytest.mark.slurm2411
@pytest.mark.slurm_exclusive
def test_node_down_while_a_job_runs(local_slurm, tmp_path):
    """The node is set DOWN under a running job: the point is node_fail or cancelled, never a
    boundary, never rerun behind the watcher's back; the node is resumed afterwards."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2@1": SLEEP})
    out = tmp_path / "camp"
    proc = start_sweep(
        *scripted_run(out, 512, max_batch=4, profile=profile(tmp_path)), plan=plan, log=tmp_path / "watcher.log"
    )
    try:
        running_job(out, "20m-c512", 2)
        try:
            subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=down", "reason=fault-test"], check=True)
            assert finish(proc, timeout=120) == BLOCKED, (tmp_path / "watcher.log").read_text()
        finally:
            subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], check=False)
            slurm_tool("start")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert check_campaign(out, since) == {"20m-c512": "blocked"}
    assert result_kind(out, "20m-c512", 2) in ("node_fail", "cancelled")


def test_disk_full_while_writing_a_result(local_slurm, tmp_path):
    """The campaign lives on a small tmpfs that fills up while a job runs: the watcher stops
    with one line and a non-zero exit; after space is freed, --resume finishes the campaign.
    22.05 only: 24.11's jobs run in a mount namespace that does not see a tmpfs mounted later."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        since = datetime.now() - timedelta(seconds=2)
        plan = write_plan(tmp_path, {"20m-c512-b2@1": {"outcome": "sleep", "seconds": 4, "then": "ok"}})
        out = disk / "camp"
        proc = start_sweep(
            *scripted_run(out, 512, max_batch=4, profile=profile(tmp_path)), plan=plan, log=tmp_path / "watcher.log"
        )
        try:
            running_job(out, "20m-c512", 2)
            filler = disk / "filler"
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
            code = finish(proc, timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        log = (tmp_path / "watcher.log").read_text()
        assert code not in (0, -9), log
        assert "Traceback" not in log and log.strip().splitlines()[-1].startswith("throughput-sweep: "), log
        assert "resume with" in log.strip().splitlines()[-1], log
        assert "No space left on device" in log.strip().splitlines()[-1], log
        filler.unlink()
        r = sweep("run", "--output", out, "--resume", "--retry-failed", *WATCH, plan=plan)
        if r.returncode == 2 and "--retry-failed" in r.stderr:
            r = sweep("run", "--output", out, "--resume", *WATCH, plan=plan)
        assert r.returncode in (0, BLOCKED), r.stderr
        check_campaign(out, since)
        assert not list(out.rglob(".*.tmp")), "a temp file of an atomic write was left behind"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
