"""What a cluster user sees, on the real local Slurm (tools/local-slurm.sh) with the scripted
worker: `status` asks Slurm about the jobs the files say are out (pending with squeue's
reason, cancelled while no watcher ran) and names a dead watcher's stale lock; a refusal
caused by the frozen profile says to fix the profile, and `--resume --profile FIXED`
replaces it while nothing of the campaign has run."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from campaign_helpers import (
    BLOCKED,
    SWEEP,
    job_state,
    profile,
    receipts,
    start_sweep,
    sweep,
    sweep_env,
    wait_for,
    write_plan,
)
from throughput_sweep.campaign import open_campaign
from throughput_sweep.exit_statuses import EXIT_INCOMPLETE as INCOMPLETE
from throughput_sweep.live import ask
from throughput_sweep.schedulers.slurm.backend import SlurmScheduler

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAST = ["--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "1", "--no-progress"]


def receipt_job(out: Path, attempt: int) -> str:
    path = out / f"curves/20m-c512/b1/attempt-{attempt}/receipt.json"
    wait_for(path.exists, 60, f"the receipt of attempt {attempt}")
    return json.loads(path.read_text())["job_id"]


def status(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = sweep("status", "--output", out, *extra, env=env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_status_asks_slurm_names_a_stale_lock_and_shows_a_job_cancelled_while_no_watcher_ran(local_slurm, tmp_path):
    """A job held in the queue shows as pending with squeue's reason; after a SIGKILL of the
    watcher, status names the stale lock's pid; the job scancelled meanwhile shows as cancelled
    with the retry command (`--offline`: still running, as the files say); without squeue,
    status says so in one line; the retry then finishes the campaign."""
    out = tmp_path / "camp"
    try:
        _held_job_cancelled_while_no_watcher_ran(out, tmp_path)
    finally:  # a held job never ends by itself: leave none in the shared queue
        ids = [r["job_id"] for r in receipts(out)]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)


def _held_job_cancelled_while_no_watcher_ran(out: Path, tmp_path: Path) -> None:
    held = profile(tmp_path, extra_submit_args=["--hold"])  # every job waits for `scontrol release`
    plan = write_plan(tmp_path, {})
    args = [
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "1",
        "--profile",
        held,
        *FAST,
    ]
    watcher = start_sweep(*args, plan=plan, log=tmp_path / "watcher.log")
    try:
        job = receipt_job(out, 1)
        wait_for(lambda: job_state(job) == "PENDING", 30, f"job {job} to pend")
        live = status(out)
        assert live.returncode == INCOMPLETE, live.stdout + live.stderr
        assert f"a watcher is running (pid {watcher.pid} on " in live.stdout
        assert f"pending: batch 1 attempt 1, job {job} (JobHeldUser)" in live.stdout
        assert "jobs now: 1 pending (JobHeldUser)" in live.stdout
        watcher.send_signal(signal.SIGKILL)
        watcher.wait(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    stale = status(out).stdout
    assert f"no watcher is running (stale lock of pid {watcher.pid} on " in stale
    assert f"resume with: {SWEEP[0]} {SWEEP[1]} run --output {out} --resume" in stale

    subprocess.run(["scancel", job], check=True)  # someone else cancels the pending job
    wait_for(lambda: job_state(job) in ("", "CANCELLED"), 30, f"job {job} to end")
    live = status(out)
    assert live.returncode == INCOMPLETE
    line = next(x for x in live.stdout.splitlines() if f"job {job}" in x)
    assert line.strip().startswith(f"ended: batch 1 attempt 1, job {job} CANCELLED while no watcher ran")
    assert line.endswith(f"run --output {out} --resume --retry-failed")
    assert "jobs now: 1 ended (CANCELLED) while no watcher ran" in live.stdout
    asked = SlurmScheduler(open_campaign(out).manifest.profile)
    assert ask(open_campaign(out), "sweep", offline=False, scheduler=asked).jobs[job].state == "cancelled"
    assert asked.command_counts["squeue"] == 1 and sum(asked.command_counts.values()) <= 2, asked.command_counts

    offline = status(out, "--offline")
    assert offline.returncode == INCOMPLETE
    assert f"running: batch 1 attempt 1, job {job}" in offline.stdout and "CANCELLED" not in offline.stdout
    assert "the scheduler was not asked" in offline.stdout and "stale lock" in offline.stdout

    for env in (
        dict(sweep_env(None), PATH=str(tmp_path / "no-slurm-here")),  # squeue and sacct missing
        dict(sweep_env(None), SLURM_CONF=str(tmp_path / "plan.json")),
    ):  # squeue and sacct failing
        blind = status(out, env=env)
        assert blind.returncode == INCOMPLETE, blind.stderr
        notes = [x for x in blind.stdout.splitlines() if x.startswith("cannot ask the scheduler")]
        assert len(notes) == 1 and notes[0].endswith("shown from the campaign's files alone"), blind.stdout
        assert f"running: batch 1 attempt 1, job {job}" in blind.stdout

    retry = start_sweep(
        "run", "--output", out, "--resume", "--retry-failed", *FAST, plan=plan, log=tmp_path / "retry.log"
    )
    try:
        second = receipt_job(out, 2)
        subprocess.run(["scontrol", "release", second], check=True)
        assert retry.wait(timeout=180) == 0, (tmp_path / "retry.log").read_text()
    finally:
        if retry.poll() is None:
            retry.kill()
            retry.wait()
    kinds = [
        json.loads((out / f"curves/20m-c512/b1/attempt-{k}/result.json").read_text())["outcome"]["kind"] for k in (1, 2)
    ]
    assert kinds == ["cancelled", "ok"]
    done = status(out)
    assert done.returncode == 0 and "no watcher is running\n" in done.stdout  # released cleanly: no stale lock
    assert "GPU-hours so far: " in done.stdout and "over 2 job(s)" in done.stdout


def test_a_refusal_of_the_frozen_profile_says_fix_it_and_resume_profile_replaces_it_while_nothing_ran(
    local_slurm, tmp_path
):
    out = tmp_path / "camp"
    bad = profile(tmp_path, "bad.yaml", partition="nosuch-partition")
    good = profile(tmp_path, "fixed.yaml")
    plan = write_plan(tmp_path, {})
    # --no-preflight: past the preflight (which refuses this profile before creation), to sbatch's own refusal.
    first = sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "1",
        "--profile",
        bad,
        *FAST,
        "--no-preflight",
        plan=plan,
    )
    assert first.returncode == BLOCKED, first.stdout + first.stderr
    advice = first.stderr.strip().splitlines()[-1]
    assert "Invalid partition name specified" in first.stdout
    assert "frozen profile 'local-slurm-test' (check its partition)" in advice
    assert "fix the profile and start a new campaign (choose a new --output)" in advice
    assert (
        f"nothing of this campaign has run yet: {SWEEP[0]} {SWEEP[1]} run --output {out} --resume --profile FIXED"
        in advice
    )
    assert "--retry-failed" not in first.stdout + first.stderr
    shown = status(out)
    assert shown.returncode == BLOCKED and "--retry-failed" not in shown.stdout
    assert "refused for the campaign's frozen profile (check its partition); not worth retrying" in shown.stdout
    assert "GPU-hours so far: 0 (no job has been accepted)" in shown.stdout
    assert sweep("collect", "--output", out).returncode == 0
    readme = (out / "README.md").read_text()
    assert "fix the profile and start a new campaign" in readme and "--retry-failed" not in readme

    fixed = sweep("run", "--output", out, "--resume", "--profile", good, *FAST, plan=plan)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["profile"]["partition"] == local_slurm.partition
    [replaced] = manifest["profile_replacements"]
    assert replaced["old"]["partition"] == "nosuch-partition" and replaced["new_name"] == "local-slurm-test"
    assert replaced["old_sha256"] != replaced["new_sha256"] and replaced["replaced_at"]
    settlement = json.loads((out / "curves/20m-c512/b1/attempt-1/settlement.json").read_text())
    assert settlement["state"] == "refused"
    assert json.loads((out / "curves/20m-c512/b1/attempt-2/result.json").read_text())["outcome"]["kind"] == "ok"

    again = sweep("run", "--output", out, "--resume", "--profile", bad, *FAST, plan=plan)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "froze its profile 'local-slurm-test' when it was created and jobs have been submitted" in again.stderr
    assert json.loads((out / "manifest.json").read_text()) == manifest
