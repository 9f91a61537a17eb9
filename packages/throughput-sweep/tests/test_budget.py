"""Allocation budgets without a Slurm: the pending reasons, the progress line, what the preflight
reads from `scontrol show assoc_mgr` (text captured from the local Slurm 22.05), and a job
Slurm ended early. The real-Slurm cases are tests/test_budget_slurm.py."""

from __future__ import annotations

from pathlib import Path

import msgspec

from throughput_schema import ClusterProfile
from throughput_slurm.sacct import AccountingRow
from throughput_sweep.ended_early import elapsed_and_limit, exit_code_pending, message
from throughput_sweep.progress import pending_text
from throughput_sweep.schedulers.base import Findings, JobStatus
from throughput_sweep.schedulers.slurm.allocation_budget import Budget, _records, billing, check_budgets
from throughput_sweep.schedulers.slurm.backend import SlurmScheduler
from throughput_sweep.schedulers.slurm.reasons import (
    BUDGET_FIX,
    budget_used_up,
    budget_wait,
    never_starts,
    pending_fix,
    pending_reason,
)
from throughput_sweep.schedulers.slurm.text import job_status, pending, slurmstepd_says

ASSOC_MGR = """Current Association Manager state

Association Records

ClusterName=local Account=budget UserName= Partition= Priority=0 ID=10
    SharesRaw/Norm/Level/Factor=1/18446744073709551616.00/1/0.00
    UsageRaw/Norm/Efctv=103.00/1.00/0.00
    ParentAccount=root(1) Lft=10 DefAssoc=No
    GrpTRESMins=cpu=N(1),mem=N(1774),energy=N(0),node=N(1),billing=N(1),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=1(1)
    GrpTRESRunMins=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(0)
ClusterName=local Account=budget UserName=root(0) Partition= Priority=0 ID=11
    ParentAccount= Lft=13 DefAssoc=Yes
    GrpTRESMins=cpu=600(12),mem=N(1774),energy=N(0),node=N(1),billing=N(1),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(1)
"""


def _profile(**changes) -> ClusterProfile:
    raw = dict(name="t", scheduler="slurm", gpus_per_job=1, cpus_per_task=8, mem="64G", time_limit_minutes=4)
    raw.update(changes)
    return msgspec.convert(raw, ClusterProfile)


def test_budget_reasons_never_start_and_run_minutes_wait():
    for used_up in ("AssocGrpGRESMinutes", "AssocGrpCPUMinutesLimit", "QOSGrpBillingMinutes", "AssocGrpBillingMinutes"):
        assert budget_used_up(used_up) and never_starts(used_up) and not budget_wait(used_up)
        assert pending_fix(used_up) == BUDGET_FIX
    for wait in ("AssocGrpGRESRunMinutes", "AssocGrpCPURunMinutesLimit", "QOSGrpBillingRunMinutes"):
        assert budget_wait(wait) and not never_starts(wait) and not budget_used_up(wait)
    # A per-job limit is the profile's to fix, not a budget.
    assert never_starts("AssocMaxCpuMinutesPerJobLimit") and not budget_used_up("AssocMaxCpuMinutesPerJobLimit")


def test_slurms_none_is_no_pending_reason_and_run_minutes_say_they_wait():
    assert pending_reason("None") == "" and pending_reason("(null)") == "" and pending_reason("Priority") == "Priority"
    assert pending_text([pending("None")]) == "1 pending (no reason given)"
    assert pending_text([pending("AssocGrpGRESRunMinutes")]) == (
        "1 pending (AssocGrpGRESRunMinutes: a budget of running jobs' minutes, waiting for running jobs to end)"
    )


def test_assoc_mgr_limits_and_usage_are_read_per_record():
    records = _records(ASSOC_MGR, "ClusterName=")
    assert [(f["UserName"], limits) for f, limits in records] == [
        ("", {"gres/gpu": (1, 1)}),
        ("root(0)", {"cpu": (600, 12)}),
    ]
    assert records[0][0]["ParentAccount"] == "root(1)"


def test_less_than_one_job_left_is_a_problem_and_a_worst_case_beyond_it_a_note():
    profile = _profile()
    found = Findings()
    need = {"gres/gpu": 4.0, "cpu": 32.0}
    check_budgets(
        [Budget("account budget", "gres/gpu", 10, 7), Budget("account budget", "cpu", 600, 12)],
        need,
        20,
        "the dry run's worst case",
        profile,
        found,
    )
    assert found.problems == [
        "account budget's GrpTRESMins gres/gpu=10 has 7 used, 3 left: less than one job needs "
        "(4 min x 1 gres/gpu = 4); ask for more, or use a profile with another account"
    ]
    assert found.notes == [
        "the dry run's worst case, 20 job(s) of 32 cpu-minutes each, is more than the 588 left of account "
        "budget's GrpTRESMins cpu=600 (12 used): the campaign stops on its budget if it runs out (exit status 6)"
    ]


def test_billing_is_the_cpus_or_the_weighted_sum():
    profile = _profile()
    assert billing(profile, "", False) == 8
    assert billing(profile, "CPU=1.0,Mem=0.25G,GRES/gpu=2.0", False) == 8 + 16 + 2
    assert billing(profile, "CPU=1.0,Mem=0.25G,GRES/gpu=2.0", True) == 16
    assert billing(profile, "CPU=x", False) is None


def _timeout(elapsed: str, exit_code: str = "8:0") -> JobStatus:
    row = AccountingRow(job_id="1", state="TIMEOUT", exit_code=exit_code, timelimit="00:04:00", elapsed=elapsed)
    return job_status("1", "TIMEOUT", row=row)


def test_a_timeout_well_before_the_limit_is_ended_early(tmp_path: Path):
    assert elapsed_and_limit(_timeout("00:00:52"), 4) == (52.0, 240.0)
    assert elapsed_and_limit(_timeout("00:03:59"), 4) is None  # within the slack: its own time limit
    assert exit_code_pending(_timeout("00:00:52", "0:0"), 4) and not exit_code_pending(_timeout("00:00:52"), 4)
    log = tmp_path / "slurm-1.out"
    log.write_text(
        "slurmstepd-vm: error: *** JOB 1 ON vm CANCELLED AT 2026-12-03T08:22:55 DUE TO TIME LIMIT ***\n"
        "slurmstepd-vm: error: *** REASON: Job is at or exceeds association (acc=budget/user=(null)/part=(null)) "
        "group max TRES(gres/gpu) minutes of 1 with 1 ***\n"
    )
    says = slurmstepd_says(log)
    assert says == (
        "Job is at or exceeds association (acc=budget/user=(null)/part=(null)) group max TRES(gres/gpu) minutes of 1 with 1"
    )
    said = SlurmScheduler.early_end(log, "TimeLimit")
    assert said == f"; Slurm says: {says} (scontrol: Reason=TimeLimit)"
    text = message(_timeout("00:00:52"), 52.0, 240.0, SlurmScheduler.title, said)
    assert text.startswith("Slurm ended the job TIMEOUT after 52 s of its 4 min time limit; Slurm says: Job is at")
    assert "(scontrol: Reason=TimeLimit)" in text and "cancelled" not in text
    assert slurmstepd_says(tmp_path / "missing.out") == ""
    assert SlurmScheduler.early_end(tmp_path / "missing.out", "") == ""
