"""A real cluster's limits on the real local Slurm (tools/local-slurm.sh): a QOS submit limit,
a partition whose MaxTime is below the profile's time limit, sacct by windows, slurmdbd down.

Uses the restrictions the local Slurm always has: account `limited` (QOS submit2,
MaxSubmitJobsPerUser=2), partition `short` (MaxTime=5, EnforcePartLimits left at NO so a
longer job is accepted and pends with PartitionTimeLimit), AccountingStorageEnforce=
associations,limits,qos.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec
import pytest
import yaml

from campaign_helpers import (
    BLOCKED,
    ROOT,
    assert_exactly_one_job_per_point,
    profile,
    receipts,
    slurm_tool,
    sweep,
    write_plan,
)
from optimizer_campaigns import audit
from throughput_schema import ClusterProfile
from throughput_sweep.schedulers.base import QueryFailed, SubmitFailed
from throughput_sweep.schedulers.slurm.backend import SlurmScheduler

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAST = ["--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "2"]


def _profile(**changes) -> ClusterProfile:
    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    raw.update(changes)
    return msgspec.convert(raw, ClusterProfile)


def _script(folder: Path, body: str = "sleep 60") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.sh"
    path.write_text(f"#!/bin/bash\n{body}\n")
    return path


def enforced_limits() -> None:
    """The QOS limits bite only with AccountingStorageEnforce=...limits,qos: a Slurm started by
    an older tools/local-slurm.sh lacks them, and the limit tests would check nothing."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    line = next((x for x in config.splitlines() if x.startswith("AccountingStorageEnforce")), "")
    enforce = line.split("=", 1)[-1].strip()
    if not {"limits", "qos"} <= set(enforce.replace(" ", "").split(",")):
        pytest.fail(
            f"the local Slurm has AccountingStorageEnforce={enforce}, not limits,qos: restart it with "
            "tools/local-slurm.sh of a checkout that has the restrictions",
            pytrace=False,
        )


@contextmanager
def held_job(account: str, tmp_path: Path):
    """One of the user's other jobs, held in the queue (it counts against a submit limit)."""
    enforced_limits()
    script = _script(tmp_path / "held")
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--hold",
            f"--account={account}",
            "--gpus=1",
            "--time=1",
            "-o",
            "/dev/null",
            "-J",
            "held-by-test",
            str(script),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    try:
        yield job_id
    finally:
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.slurm_exclusive
def test_sbatch_over_the_submit_limit_is_a_limit_not_a_refusal(local_slurm, tmp_path):
    sched = SlurmScheduler(_profile(account="limited", time_limit_minutes=1), backoff_seconds=0.1)

    async def main():
        first = await sched.submit(_script(tmp_path / "a"), token=f"tst-{uuid.uuid4().hex[:12]}", workdir=tmp_path)
        try:
            with pytest.raises(SubmitFailed) as info:
                await sched.submit(_script(tmp_path / "b"), token=f"tst-{uuid.uuid4().hex[:12]}", workdir=tmp_path)
        finally:
            await sched.cancel(first)
        return info.value

    with held_job("limited", tmp_path):
        refusal = anyio.run(main)
    assert refusal.limit and not refusal.permanent and not refusal.maybe_submitted
    # The whole of what sbatch said, the reason word included.
    assert "QOSMaxSubmitJobPerUserLimit / sbatch: error: Batch job submission failed: Job violates" in str(refusal)
    assert sched.command_counts["sbatch"] == 2  # no blind retry inside submit


@pytest.mark.slurm_exclusive
def test_a_campaign_wider_than_the_submit_limit_completes(local_slurm, tmp_path):
    """Two curves, cap 8, on account `limited` while one of the user's other jobs is queued:
    only one more job fits, every curve completes, the limit is said once and shown."""
    since = datetime.now() - timedelta(seconds=5)
    out = tmp_path / "camp"
    plan = write_plan(tmp_path, {})
    with held_job("limited", tmp_path):
        r = sweep(
            "run",
            "--output",
            out,
            "--models",
            "20m",
            "--contexts",
            "512",
            "1024",
            "--max-batch",
            "8",
            "--profile",
            profile(tmp_path, account="limited", max_concurrent_jobs=8),
            *FAST,
            plan=plan,
        )
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("refused a job for a submit limit") == 1, r.stderr
    assert "submit limit: 1 job(s) at once (the profile allows 8)" in r.stderr
    status = sweep("status", "--output", out, plan=plan).stdout
    assert "blocked" not in status and status.count("capped") >= 2, status
    settled = [json.loads(p.read_text()) for p in out.glob("curves/*/b*/attempt-*/settlement.json")]
    assert settled and {s["state"] for s in settled} == {"never-submitted"}, settled
    assert all(r["accounting_final"] for r in receipts(out))
    assert_exactly_one_job_per_point(out, since)  # no job behind a refused intent, none twice
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    checked = audit(out)
    assert checked.returncode == 0 and "0 failed" in checked.stdout, checked.stdout + checked.stderr


def test_a_job_pending_past_the_partition_time_limit_is_refused(local_slurm, tmp_path):
    """Partition `short` (MaxTime 5) and a 14-minute profile: the job pends with
    PartitionTimeLimit; the watcher cancels it and the curve blocks, refused, with the fix."""
    part = subprocess.run(["scontrol", "show", "partition", "short"], capture_output=True, text=True).stdout
    if "MaxTime=00:05:00" not in part:
        pytest.fail(
            "the local Slurm has no partition `short` with MaxTime=5: restart it with tools/local-slurm.sh "
            "of a checkout that has the restrictions",
            pytrace=False,
        )
    out = tmp_path / "camp"
    plan = write_plan(tmp_path, {})
    # Pends the profile's never_start_seconds (8 s on the local Slurm) before it is refused.
    prof = profile(tmp_path, partition="short", time_limit_minutes=14, watchdog_minutes=13)
    # --no-preflight: past the preflight, which refuses this profile before creation (test_preflight_slurm.py).
    r = sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "2",
        "--profile",
        prof,
        *FAST,
        "--no-progress",
        "--no-preflight",
        plan=plan,
    )
    assert r.returncode == BLOCKED, r.stderr
    assert "can never start: PartitionTimeLimit; cancelled" in r.stderr
    result = json.loads((out / "curves/20m-c512/b1/attempt-1/result.json").read_text())
    assert result["outcome"]["kind"] == "refused" and result["outcome"]["reason"] == "PartitionTimeLimit"
    assert "time_limit_minutes" in result["outcome"]["fix"]
    assert "could not create" not in result["outcome"]["message"]
    [receipt] = receipts(out)
    assert receipt["accounting"]["state"] == "cancelled"
    status = sweep("status", "--output", out, plan=plan)
    assert "refused" in status.stdout and "PartitionTimeLimit" in status.stdout, status.stdout
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    # The refused job had no allocation to check and its state agrees with its outcome. (It is
    # the campaign's only job, and it never ran: the checks of worker times and concurrency
    # rightly fail for having nothing to check.)
    checked = audit(out)
    failed = [line for line in checked.stdout.splitlines() if line.startswith("FAIL ")]
    assert failed and not [f for f in failed if not f.startswith(("FAIL slurm.worker_times", "FAIL slurm.peak"))], (
        failed
    )


def test_sacct_by_name_is_asked_in_windows_no_wider_than_the_span(local_slurm, tmp_path):
    sched = SlurmScheduler(_profile(time_limit_minutes=1), query_span=timedelta(days=1))
    token = f"tst-{uuid.uuid4().hex[:12]}"

    async def main():
        job_id = await sched.submit(_script(tmp_path, "true"), token=token, workdir=tmp_path)
        before = sched.command_counts["sacct"]
        found = await sched.find_by_token([token], datetime.now() - timedelta(days=3))
        calls = sched.command_counts["sacct"] - before
        # An intent's time is UTC with its offset (settle_intents): the same windows.
        aware = await sched.find_by_token([token], datetime.now(UTC) - timedelta(days=3))
        assert aware == found and sched.command_counts["sacct"] - before == 2 * calls
        return job_id, found, calls

    job_id, found, calls = anyio.run(main)
    assert found == {token: [job_id]}
    assert calls == 4  # three days and the hour's margin, one day at a time


@pytest.mark.slurm_exclusive
def test_sacct_windows_pass_max_query_time_range_where_one_wide_window_is_refused(local_slurm, tmp_path):
    """slurmdbd's MaxQueryTimeRange binds ordinary users (root is exempt), so sacct runs as the
    local Slurm's plain user `sweeper`: real sacct, another uid."""
    sacct = tmp_path / "sacct-as-sweeper"
    sacct.write_text('#!/bin/sh\nexec runuser -u sweeper -- sacct "$@"\n')
    sacct.chmod(0o755)
    token = f"tst-{uuid.uuid4().hex[:12]}"
    since = datetime.now(UTC) - timedelta(days=3)

    def lookup(span: timedelta) -> dict[str, list[str]]:
        sched = SlurmScheduler(_profile(time_limit_minutes=1), query_span=span, commands={"sacct": str(sacct)})
        return anyio.run(sched.find_by_token, [token], since)

    slurm_tool("dbd-set", "MaxQueryTimeRange=1-00:00:00")
    try:
        assert lookup(timedelta(days=1)) == {token: []}
        with pytest.raises(QueryFailed, match="Too wide of a date range"):
            lookup(timedelta(days=7))
    finally:
        slurm_tool("dbd-set")


@contextmanager
def slurmdbd_stopped():
    slurm_tool("stop-daemon", "slurmdbd")
    try:
        yield
    finally:
        slurm_tool("start-daemon", "slurmdbd")
        slurm_tool("start")


@pytest.mark.slurm_exclusive
def test_with_slurmdbd_down_a_job_gone_from_squeue_is_reported_so(local_slurm):
    """What the watcher settles from the attempt folder after its grace
    (packages/throughput-sweep/tests/test_cluster_limits.py): squeue answered without the job
    and sacct failed, said apart from a squeue that did not answer."""
    sched = SlurmScheduler(_profile(), command_timeout=20)

    async def main():
        return await sched.poll(["99999997"])

    with slurmdbd_stopped():
        if subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True).returncode == 0:
            pytest.fail(
                "sacct still answers after `tools/local-slurm.sh stop-daemon slurmdbd`: a slurmdbd that "
                "its pid file does not name is running",
                pytrace=False,
            )
        status = anyio.run(main)["99999997"]
    assert status.state == "gone" and status.note.startswith("gone from squeue"), status
    assert "sacct failed" in status.note
