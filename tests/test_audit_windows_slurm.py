"""The audit of an old campaign on a real Slurm whose slurmdbd has MaxQueryTimeRange.

slurmdbd refuses an ordinary user a sacct time window wider than MaxQueryTimeRange ("Too
wide of a date range in query"); root is exempt, so the audit's sacct runs as the Slurm's
ordinary user `sweeper`. The campaign's jobs are real and recent, pointed at by receipts;
half its intents are rewritten to days ago (as a campaign resumed over a week has), and
the manifest to five days ago. With MaxQueryTimeRange=1-00:00:00, one window from the
campaign's creation to now is refused, and the audit asking by name in windows of at most
a day around the intents' times passes, with real counts, and still finds a job submitted
under a token without a receipt.
"""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from campaign_builder.complete import build_throughput
from test_audit_slurm import local_profile, real_job_fails, sbatch, submit_campaign_jobs, wait_accounted
from throughput_audit import slurm
from throughput_audit.audit import run_audit
from throughput_schema import Manifest, Receipt, SubmissionIntent, read, write_atomic
from throughput_slurm.sacct import Window

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_exclusive]

ROOT = Path(__file__).resolve().parents[1]
LOCAL_SLURM = ROOT / "tools" / "local-slurm.sh"
TOO_WIDE = "Too wide of a date range in query"


def as_sweeper(argv):
    """The audit's sacct, run for real as an ordinary (non-admin) Slurm user."""
    return subprocess.run(
        ["runuser", "-u", "sweeper", "--", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=slurm.slurm_env(),
    )


def dbd_set(*options: str) -> None:
    done = subprocess.run(
        [str(LOCAL_SLURM), "dbd-set", *options], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # dbd-set restarts slurmdbd; where a concurrent start left another slurmdbd holding the
    # port, the restart fails and that one answers with the old file: make it re-read it.
    again = subprocess.run(["sacctmgr", "-i", "reconfigure"], capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stdout + again.stderr


@contextmanager
def max_query_time_range(value: str):
    """slurmdbd with MaxQueryTimeRange for as short a while as the test needs: others share this Slurm."""
    try:
        dbd_set(f"MaxQueryTimeRange={value}")
        yield
    finally:
        dbd_set()  # the permissive slurmdbd.conf again


def days_ago(now: datetime, days: float) -> str:
    return (now - timedelta(days=days)).isoformat()


@pytest.fixture
def old_campaign(local_slurm, tmp_path):
    built = build_throughput(tmp_path / "old", contexts=(512, 1024), first_oom=4)
    built.manifest = msgspec.structs.replace(built.manifest, profile=local_profile())
    write_atomic(built.root / "manifest.json", built.manifest)
    jobs = submit_campaign_jobs(built)  # intents at the time of their real jobs
    now = datetime.now(UTC)
    manifest = read(built.root / "manifest.json", Manifest)
    write_atomic(built.root / "manifest.json", msgspec.structs.replace(manifest, created_at=days_ago(now, 5)))
    # The curve 20m-c1024 was submitted days ago: its intents say so (its jobs are recent).
    for batch, days in ((1, 5), (2, 3 - 1 / 48), (4, 3)):
        folder = built.points["20m-c1024"][batch]
        intent = read(folder / "intent.json", SubmissionIntent)
        write_atomic(folder / "intent.json", msgspec.structs.replace(intent, created_at=days_ago(now, days)))
    return built, jobs


def fails(out) -> list:
    return real_job_fails(out)


def test_an_old_campaign_is_audited_in_windows_under_max_query_time_range(old_campaign, tmp_path):
    built, jobs = old_campaign
    tokens = sorted(
        read(f / "intent.json", SubmissionIntent).token for points in built.points.values() for f in points.values()
    )
    created = datetime.fromisoformat(read(built.root / "manifest.json", Manifest).created_at)
    # The one window the audit used to ask in: from a day before the campaign's creation to now.
    since = (created - timedelta(days=1)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    single = slurm._argv([f"--starttime={since}", "--endtime=now", "--name=" + ",".join(tokens)], users=("--allusers",))
    folder = built.points["20m-c512"][2]
    receipt = read(folder / "receipt.json", Receipt)

    with max_query_time_range("1-00:00:00"):
        refused = as_sweeper(single)
        assert refused.returncode != 0 and TOO_WIDE in refused.stderr, (refused.returncode, refused.stderr)

        # Asked in windows as wide as the campaign is old (7 days), the audit is refused too.
        wide = run_audit(built.root, runner=as_sweeper, settle_seconds=20, sacct_window=timedelta(days=7))
        assert [c.name for c in fails(wide)] == ["slurm.sacct"]
        assert TOO_WIDE in fails(wide)[0].message and wide.report.scheduler_accounting == "not_available"

        # In windows of at most a day around the intents: 5 days ago, 3 days ago, now.
        out = run_audit(built.root, runner=as_sweeper, settle_seconds=20)
        assert fails(out) == [], [c.message for c in fails(out)]
        assert out.report.scheduler_accounting == "checked"
        (check,) = [c for c in out.report.checks if c.name == "slurm.unreceipted"]
        # The three jobs of 20m-c512 are found around their intents; those of 20m-c1024 ran
        # days after their intents' times, so they are not in those windows (and have receipts).
        assert check.values == {"jobs": 3, "tokens": 6, "windows": 3, "queries": 3, "span_seconds": 86400}, (
            check.message
        )
        accounted = [c for c in out.report.checks if c.name == "slurm.accounted" and c.status == "pass"]
        assert len(accounted) == len(jobs) == 6

        # A token needing 30 hours: two windows, the first exactly a day, which slurmdbd
        # allows (it refuses only wider ones).
        now = datetime.now(UTC).replace(microsecond=0)
        times = {receipt.token: (now - timedelta(hours=29), now + timedelta(hours=1))}
        rows, queries, found = slurm.query_tokens(times, runner=as_sweeper)
        assert [w.end - w.start for w in found] == [timedelta(days=1), timedelta(hours=6)] and len(queries) == 2
        assert [row.job_id for row in rows.values()] == [jobs[folder]]
        wider = Window(now - timedelta(days=1, seconds=1), now)
        assert TOO_WIDE in as_sweeper(slurm.token_argv([receipt.token], wider)).stderr

        # A second real job under one recent intent's token, which no receipt names.
        p = built.manifest.profile
        extra = sbatch(
            f"--job-name={receipt.token}",
            f"--account={p.account}",
            f"--partition={p.partition}",
            "--cpus-per-task=1",
            "--mem=100M",
            "--time=1",
            f"--output={tmp_path}/extra-%j.out",
            "--wrap=true",
        )
        wait_accounted([extra])
        out = run_audit(built.root, runner=as_sweeper, settle_seconds=20)
        assert [(c.name, c.values.get("job_id")) for c in fails(out)] == [("slurm.unreceipted", extra)]
        assert fails(out)[0].file == "curves/20m-c512/b2/attempt-1/intent.json"
