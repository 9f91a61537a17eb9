"""Campaigns whose watcher, resumed watcher and auditor each have their own time zone (real Slurm).

Slurm's clients print and read times in their process's zone, without an offset; every
query of the tool runs in UTC and records keep its times with their offset. Each case runs
the scripted worker with one-second windows: a campaign watched in Asia/Kolkata and audited
in UTC and in America/Los_Angeles; one stopped in Kolkata and resumed from Los Angeles; one
watched across a daylight-saving change (a TZ rule whose fall-back lies inside the run);
and a watcher SIGKILLed right after sbatch in a shell east of UTC, whose job the resume
must find by its token in sacct (squeue has forgotten it) rather than submit again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    ROOT,
    WATCH,
    check_campaign,
    profile,
    receipts,
    sacct_jobs,
    scripted_run,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)
from test_accounting_faults_slurm import min_job_age, wait_until_squeue_forgets
from throughput_sweep.exit_statuses import EXIT_INTERRUPTED
from version_one import as_version_one

pytestmark = [pytest.mark.slurm]

KOLKATA = "Asia/Kolkata"  # UTC+05:30, no daylight saving: east of UTC by a non-whole hour
LOS_ANGELES = "America/Los_Angeles"


def in_zone(tz: str, *args, plan: Path, crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`throughput-sweep ARGS` in a shell whose TZ is `tz`."""
    return sweep(*args, plan=plan, crash=crash, env={"TZ": tz}, timeout=timeout)


def start_in_zone(tz: str, *args, plan: Path, log: Path) -> subprocess.Popen:
    return start_sweep(*args, plan=plan, log=log, env={"TZ": tz})


def audit_in_zone(campaign: Path, tz: str) -> tuple[int, list[dict], str]:
    """The audit CLI in a shell whose TZ is `tz`: (exit status, its checks, its output)."""
    done = subprocess.run(
        [sys.executable, "-m", "throughput_audit.cli", "--output", str(campaign), "--allow-test-worker"],
        cwd=ROOT,
        env={**os.environ, "TZ": tz},
        capture_output=True,
        text=True,
        timeout=300,
    )
    checks = json.loads((campaign / "audit.json").read_text())["checks"]
    return done.returncode, checks, done.stdout + done.stderr


def assert_audits_clean(campaign: Path, *zones: str) -> None:
    """The audit passes in every zone, with one real receipt-accounting check per receipt,
    each comparing the final accounting (start and end included) with sacct now."""
    recorded = receipts(campaign)
    assert recorded and all(r["accounting_final"] for r in recorded), recorded
    for tz in zones:
        code, checks, said = audit_in_zone(campaign, tz)
        failed = [c["message"] for c in checks if c["status"] == "fail"]
        assert code == 0 and not failed, (tz, failed, said)
        copies = [c for c in checks if c["name"] == "slurm.receipt_accounting"]
        assert len(copies) == len(recorded) and all("equals sacct (final" in c["message"] for c in copies), (tz, copies)
        times = [c for c in checks if c["name"] == "slurm.worker_times"]
        assert len(times) >= len(recorded) and all(c["status"] == "pass" for c in times), (tz, times)


def assert_times_carry_their_offset(campaign: Path) -> None:
    for r in receipts(campaign):
        acc = r["accounting"]
        assert acc["start"].endswith("+00:00") and acc["end"].endswith("+00:00"), acc


# --------------------------------------------------------------------------- the cases


@pytest.mark.slurm2411
def test_a_campaign_watched_in_kolkata_audits_clean_in_utc_and_los_angeles(local_slurm, tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom"})
    out = tmp_path / "camp"
    r = in_zone(KOLKATA, *scripted_run(out, 512, 1024, max_batch=4, profile=profile(tmp_path)), plan=plan)
    assert r.returncode == 0, r.stdout + r.stderr
    assert in_zone(KOLKATA, "collect", "--output", out, plan=plan).returncode == 0
    assert_audits_clean(out, "UTC", LOS_ANGELES, KOLKATA)
    assert_times_carry_their_offset(out)
    assert json.loads((out / "manifest.json").read_text())["watcher_zone"] == KOLKATA

    # The same campaign as version 1 wrote it before times carried their offset: sacct's
    # Kolkata wall times in the receipts, no zone in the manifest. Upgraded in the zone it
    # was watched in, its receipts are today's again and it audits clean anywhere.
    today = [r["accounting"] for r in receipts(out)]
    as_version_one(out, watched_in=KOLKATA)
    upgraded = subprocess.run(
        [sys.executable, "-m", "throughput_schema.cli", "upgrade", str(out)],
        env={**os.environ, "TZ": KOLKATA},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgraded.returncode == 0 and "receipts held their job's times without an offset" in upgraded.stdout
    assert [r["accounting"] for r in receipts(out)] == today
    assert_audits_clean(out, "UTC", LOS_ANGELES)
    r = in_zone(LOS_ANGELES, "run", "--output", out, "--resume", *WATCH, plan=plan)  # and it still resumes
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_campaign_stopped_in_kolkata_and_resumed_from_los_angeles_audits_clean(local_slurm, tmp_path):
    # b1 ends (its accounting recorded in Kolkata) while b2 runs; the watcher is stopped then.
    plan = write_plan(tmp_path, {"20m-c512-b2": {"outcome": "sleep", "seconds": 10, "then": "ok"}})
    out = tmp_path / "camp"
    args = scripted_run(out, 512, max_batch=4, profile=profile(tmp_path))
    watcher = start_in_zone(KOLKATA, *args, plan=plan, log=tmp_path / "watcher.log")
    try:
        b1 = out / "curves/20m-c512/b1/attempt-1/receipt.json"
        b2 = out / "curves/20m-c512/b2/attempt-1/receipt.json"

        def b1_final_while_b2_runs() -> bool:
            assert watcher.poll() is None, (tmp_path / "watcher.log").read_text()
            return b2.exists() and b1.exists() and json.loads(b1.read_text())["accounting_final"]

        wait_for(b1_final_while_b2_runs, 120, "b1's final accounting while b2 runs")
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == EXIT_INTERRUPTED, (tmp_path / "watcher.log").read_text()
    finally:
        watcher.kill()
    r = in_zone(LOS_ANGELES, "run", "--output", out, "--resume", *WATCH, plan=plan)
    assert r.returncode == 0, r.stdout + r.stderr
    assert in_zone(LOS_ANGELES, "collect", "--output", out, plan=plan).returncode == 0
    assert len(receipts(out)) == 3
    assert_audits_clean(out, "UTC", KOLKATA)
    assert_times_carry_their_offset(out)


def fall_back_zone(change: datetime) -> str:
    """A TZ rule, east of UTC, in daylight-saving time now (UTC+6) until `change`, when its
    clocks go back an hour to UTC+5: the hour before the change repeats."""
    local = change.astimezone(UTC) + timedelta(hours=6)  # the rule's end is in daylight-saving time
    day = local.timetuple().tm_yday - 1  # POSIX "n": zero-based, February 29 counted
    return f"<+05>-5<+06>-6,0/0,{day}/{local:%H:%M:%S}"


def test_a_campaign_across_a_daylight_saving_change_audits_clean(local_slurm, tmp_path):
    change = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=12)
    zone = fall_back_zone(change)
    # b1 runs for 20 s from a few seconds after the start: across the change.
    plan = write_plan(tmp_path, {"20m-c512-b1": {"outcome": "sleep", "seconds": 20, "then": "ok"}})
    out = tmp_path / "camp"
    r = in_zone(zone, *scripted_run(out, 512, max_batch=2, profile=profile(tmp_path)), plan=plan)
    assert r.returncode == 0, r.stdout + r.stderr
    assert in_zone(zone, "collect", "--output", out, plan=plan).returncode == 0
    assert_audits_clean(out, zone, "UTC")
    b1 = json.loads((out / "curves/20m-c512/b1/attempt-1/receipt.json").read_text())["accounting"]
    started, ended = (datetime.fromisoformat(t).astimezone(UTC) for t in (b1["start"], b1["end"]))
    assert started < change < ended, (change, b1)
    # The zone's own clocks went back during the job (the rule is what the test says it is).
    shown = subprocess.run(
        ["date", "-d", f"@{int(change.timestamp())}", "+%z"], env={"TZ": zone}, capture_output=True, text=True
    )
    before = subprocess.run(
        ["date", "-d", f"@{int(change.timestamp()) - 1}", "+%z"], env={"TZ": zone}, capture_output=True, text=True
    )
    assert (before.stdout.strip(), shown.stdout.strip()) == ("+0600", "+0500")
    assert_times_carry_their_offset(out)


@pytest.mark.slurm2411
@pytest.mark.slurm_exclusive
def test_a_watcher_killed_after_sbatch_east_of_utc_is_adopted_on_resume(local_slurm, tmp_path):
    """sacct's lookup window is written in the zone sacct reads it in: were it written in
    Kolkata's local time and read as UTC, it would start hours after the job and the job
    would be judged never submitted and sent again."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {})
    out = tmp_path / "camp"
    args = scripted_run(out, 512, max_batch=2, profile=profile(tmp_path))
    with min_job_age(2, local_slurm.slurm_conf):
        r = in_zone(KOLKATA, *args, plan=plan, crash="after-submit")
        assert r.returncode == -9, r.stdout + r.stderr
        attempt = out / "curves/20m-c512/b1/attempt-1"
        assert not (attempt / "receipt.json").exists()
        token = json.loads((attempt / "intent.json").read_text())["token"]
        (job_id,) = wait_for(
            lambda: [j["job_id"] for j in sacct_jobs(since) if j["name"] == token], 30, "the job in sacct"
        )
        wait_until_squeue_forgets(job_id)
        r = in_zone(KOLKATA, "run", "--output", out, "--resume", *WATCH, plan=plan)
        assert r.returncode == 0, r.stdout + r.stderr
    assert (attempt / "receipt.json").exists(), f"job {job_id} was not adopted: " + r.stdout + r.stderr
    receipt = json.loads((attempt / "receipt.json").read_text())
    assert receipt["job_id"] == job_id and receipt["adopted"], receipt
    assert check_campaign(out, since) == {"20m-c512": "capped"}
