"""Allocation budgets on the real local Slurm: GrpTRESMins too small before the campaign (the
preflight refuses), used up while it runs (the run ends by itself with exit status 6, naming
the budget, no job left pending; raised, --resume goes on), and a GrpTRESRunMins limit that
the run waits out.

The limits sit on account `budget` (made here if missing), which only these tests' profiles
use, never on the shared `throughput` account. Budgets count usage only under
PriorityType=priority/multifactor, every PriorityCalcPeriod: `tools/local-slurm.sh
priority-set multifactor` turns it on with a one-minute period for the tests that need it (a
slurmctld restart, which running jobs survive) and `priority-set basic` restores it.

Slurm 24.11 (LOCAL_SLURM_VERSION=24.11) behaves as 22.05 here, given the same one-minute
period: it ends the running jobs TIMEOUT and pends the next with AssocGrpGRESMinutes. The
tests that read what Slurm prints (the preflight's sacctmgr and scontrol, the in-flight case's
states, reasons and log lines) run on both; the run-minutes wait, a scheduler wait with the
same reason word on both, runs on 22.05 only.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from campaign_helpers import FAST, profile, receipts, slurm_tool, sweep, write_plan
from optimizer_campaigns import audit
from throughput_sweep.exit_statuses import EXIT_BUDGET

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_exclusive, pytest.mark.slow]

ACCOUNT = "budget"


def _sacctmgr(*args: str) -> str:
    return subprocess.run(["sacctmgr", "-i", "-n", "-P", *args], capture_output=True, text=True, check=True).stdout


def _cluster() -> str:
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    return next(line.split("=", 1)[1].strip() for line in config.splitlines() if line.startswith("ClusterName"))


def _set(cluster: str, *limits: str) -> None:
    _sacctmgr("modify", "account", "where", f"name={ACCOUNT}", f"cluster={cluster}", "set", *limits)


def _clear(cluster: str) -> None:
    # Two commands: sacctmgr sets nothing else in the one that resets RawUsage.
    _set(cluster, "RawUsage=0")
    _set(cluster, "GrpTRESMins=gres/gpu=-1", "GrpTRESRunMins=gres/gpu=-1")


@contextmanager
def budget(*limits: str, multifactor: bool):
    """Account `budget` with `limits` (sacctmgr's words) and no usage; cleared afterwards."""
    cluster = _cluster()
    if not _sacctmgr("show", "account", ACCOUNT, "format=account").strip():
        _sacctmgr(
            "add", "account", ACCOUNT, f"cluster={cluster}", "description=budget tests", "organization=throughput"
        )
    if not _sacctmgr("show", "assoc", "where", "user=root", f"account={ACCOUNT}", f"cluster={cluster}", "format=user"):
        _sacctmgr("add", "user", "root", f"account={ACCOUNT}", f"cluster={cluster}")
    if multifactor:
        slurm_tool("priority-set", "multifactor")
    try:
        # Usage is reset only where multifactor counts it: after the switch, never before.
        _clear(cluster)
        _set(cluster, *limits)
        yield cluster
    finally:
        try:
            _clear(cluster)
        finally:
            if multifactor:
                slurm_tool("priority-set", "basic")


def _pending_jobs() -> str:
    return subprocess.run(
        ["squeue", "-h", "-A", ACCOUNT, "-t", "PENDING", "-o", "%i %r"], capture_output=True, text=True
    ).stdout.strip()


def _run(out: Path, prof: Path, plan: Path, *contexts: int, max_batch: int = 2, extra: tuple[str, ...] = ()):
    grid = ["--models", "20m", "--contexts", *map(str, contexts), "--max-batch", str(max_batch)]
    watch = extra if "--poll-max-seconds" in extra else (*FAST, *extra)
    return sweep("run", "--output", out, "--profile", prof, *grid, *watch, plan=plan, timeout=600)


@pytest.mark.slurm2411
def test_a_budget_smaller_than_one_job_is_refused_by_the_preflight(local_slurm, tmp_path):
    """GrpTRESMins gres/gpu=3 against 4-minute one-GPU jobs: less than one job's worth left."""
    prof = profile(tmp_path, account=ACCOUNT, time_limit_minutes=4, watchdog_minutes=3)
    with budget("GrpTRESMins=gres/gpu=3", multifactor=False):
        out = tmp_path / "camp"
        r = _run(out, prof, write_plan(tmp_path, {}), 512, extra=("--dry-run",))
    assert r.returncode == 2, r.stderr
    problems = [line for line in r.stderr.splitlines() if line.startswith("throughput-sweep: ")]
    assert problems == [
        "throughput-sweep: account budget's GrpTRESMins gres/gpu=3 has 0 used, 3 left: less than one job needs "
        "(4 min x 1 gres/gpu = 4); ask for more, or use a profile with another account"
    ], r.stderr
    assert not out.exists()


@pytest.mark.slurm2411
def test_a_budget_below_the_worst_case_is_a_note(local_slurm, tmp_path):
    """GrpTRESMins gres/gpu=10: two 4-minute jobs fit, the worst case of four does not."""
    prof = profile(tmp_path, account=ACCOUNT, time_limit_minutes=4, watchdog_minutes=3)
    with budget("GrpTRESMins=gres/gpu=10", multifactor=False):
        r = _run(tmp_path / "camp", prof, write_plan(tmp_path, {}), 512, 1024, extra=("--dry-run",))
    assert r.returncode == 0, r.stderr
    assert (
        "[sweep] note: the dry run's worst case, 4 job(s) of 4 gres/gpu-minutes each, is more than the 10 left "
        "of account budget's GrpTRESMins gres/gpu=10 (0 used): the campaign stops on its budget if it runs out "
        "(exit status 6)"
    ) in r.stderr


@pytest.mark.slurm2411
def test_a_budget_used_up_while_running_stops_the_campaign_and_resume_goes_on(local_slurm, tmp_path):
    """GrpTRESMins gres/gpu=1 and two curves whose first jobs sleep: within a decay period
    (PriorityCalcPeriod=1) Slurm ends both as TIMEOUT, long before their 4 minutes; their
    retries pend with AssocGrpGRESMinutes; the watcher cancels them and ends the run with
    exit status 6, nothing left pending. A new campaign is refused by the preflight; raised,
    --resume completes the campaign and its audit passes."""
    # Slurm gives the jobs it ended early their exit code only minutes later: the watcher keeps
    # their rows after 5 s rather than 30 (accounting_grace_seconds), as the end below allows.
    prof = profile(tmp_path, account=ACCOUNT, time_limit_minutes=4, watchdog_minutes=3, accounting_grace_seconds=5)
    out = tmp_path / "camp"
    plan = write_plan(tmp_path, {f"20m-c{c}-b1@1": {"outcome": "sleep", "seconds": 200} for c in (512, 1024)})
    with budget("GrpTRESMins=gres/gpu=1", multifactor=True) as cluster:
        # Past the preflight, which refuses a budget below one job's worth (the test above).
        r = _run(out, prof, plan, 512, 1024, extra=("--no-preflight",))
        assert r.returncode == EXIT_BUDGET, r.stdout + r.stderr
        assert _pending_jobs() == "", "a job of the campaign was left pending"
        assert "stopped on the allocation budget" in r.stderr and "AssocGrpGRESMinutes" in r.stderr, r.stderr
        for c in (512, 1024):
            first = json.loads((out / f"curves/20m-c{c}/b1/attempt-1/result.json").read_text())["outcome"]
            assert first["kind"] == "timeout" and first["ended_early"], first
            assert first["message"].startswith("Slurm ended the job TIMEOUT after "), first
            assert "group max TRES(gres/gpu) minutes of 1" in first["message"], first
            retry = json.loads((out / f"curves/20m-c{c}/b1/attempt-2/result.json").read_text())["outcome"]
            assert retry["kind"] == "refused" and retry["reason"] == "AssocGrpGRESMinutes", retry
        status = sweep("status", "--output", out, plan=plan)
        assert status.returncode == EXIT_BUDGET, status.stdout + status.stderr
        assert "STOPPED on its allocation budget" in status.stdout, status.stdout

        # Used up before a campaign: the preflight refuses it, naming the limit and the usage.
        again = _run(tmp_path / "again", prof, plan, 512)
        assert again.returncode == 2, again.stderr
        assert "account budget's GrpTRESMins gres/gpu=1 has " in again.stderr, again.stderr
        assert " used, 0 left: less than one job needs" in again.stderr, again.stderr

        _set(cluster, "GrpTRESMins=gres/gpu=-1")
        resumed = sweep("run", "--output", out, "--resume", *FAST, plan=plan, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # Every job that ran to its end has its final accounting; the cancelled retries never ran, and
    # sacct may give the jobs Slurm ended early their exit code only minutes later (ended_early.py).
    ended = [r for r in receipts(out) if r["accounting"]["state"] not in ("cancelled", "timeout")]
    assert len(ended) == 4 and all(r["accounting_final"] for r in ended), ended
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    checked = audit(out)
    assert checked.returncode == 0 and "0 failed" in checked.stdout, checked.stdout + checked.stderr


def test_a_run_minutes_budget_is_waited_out(local_slurm, tmp_path):
    """GrpTRESRunMins gres/gpu=8 against 4-minute one-GPU jobs: two run at once, a third pends
    with AssocGrpGRESRunMinutes until one ends; the progress line says it waits."""
    prof = profile(tmp_path, account=ACCOUNT, time_limit_minutes=4, watchdog_minutes=3)
    # 15 s asleep: the third job pends long enough for a few polls to show its reason.
    plan = write_plan(tmp_path, {f"20m-c{c}-b1": {"outcome": "sleep", "seconds": 15} for c in (512, 1024)})
    with budget("GrpTRESRunMins=gres/gpu=8", multifactor=True):
        # With the progress line, which FAST leaves out.
        shown = ("--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "2")
        r = _run(tmp_path / "camp", prof, plan, 512, 1024, 2048, max_batch=1, extra=shown)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "AssocGrpGRESRunMinutes: a budget of running jobs' minutes, waiting for running jobs to end" in r.stderr
    assert "can never start" not in r.stderr
