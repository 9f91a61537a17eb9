"""What a real cluster may legitimately report, each case both ways: the allocation a site
gives (more CPUs, memory in other units or per CPU, no ReqMem), the end states preemption
and deadlines give, times printed under SLURM_TIME_FORMAT, and sacct failing with exit 0."""

from __future__ import annotations

import json
from subprocess import CompletedProcess

import msgspec
import pytest

from campaign_builder.auditing import audit, edit, failures, point
from campaign_builder.files import receipt_ended
from throughput_audit import job_states, slurm
from throughput_audit.allocation import allocation_problems
from throughput_schema import ClusterProfile
from throughput_schema.outcomes import SCHEDULER_PHASE
from throughput_slurm import sacct
from throughput_slurm.sacct import AccountingRow

PROFILE = ClusterProfile(
    name="site", scheduler="slurm", account="throughput", partition="gpu", cpus_per_task=8, mem="64G"
)
ROW = AccountingRow(
    job_id="7",
    account="throughput",
    partition="gpu",
    timelimit="00:14:00",
    alloc_tres="billing=8,cpu=8,gres/gpu=1,mem=64G,node=1",
    req_mem="64G",
)


def problems(profile: ClusterProfile = PROFILE, **row) -> list[str]:
    return [what for what, _, _ in allocation_problems(msgspec.structs.replace(ROW, **row), profile)]


# (what the site reported, the field it changes, accepted?)
ALLOCATIONS = [
    ("the profile's request exactly", {}, True),
    ("more CPUs than asked (whole cores)", {"alloc_tres": "billing=10,cpu=10,gres/gpu=1,mem=64G,node=1"}, True),
    ("fewer CPUs than asked", {"alloc_tres": "billing=6,cpu=6,gres/gpu=1,mem=64G,node=1"}, False),
    ("memory in MiB", {"alloc_tres": "cpu=8,gres/gpu=1,mem=65536M,node=1"}, True),
    ("memory in TiB", {"alloc_tres": "cpu=8,gres/gpu=1,mem=0.0625T,node=1"}, True),
    ("less memory, in MiB", {"alloc_tres": "cpu=8,gres/gpu=1,mem=32768M,node=1"}, False),
    ("more memory than asked", {"alloc_tres": "cpu=8,gres/gpu=1,mem=80G,node=1"}, True),
    ("memory per CPU in ReqMem only (older Slurm)", {"alloc_tres": "cpu=8,gres/gpu=1,node=1", "req_mem": "8Gc"}, True),
    ("too little memory per CPU in ReqMem", {"alloc_tres": "cpu=8,gres/gpu=1,node=1", "req_mem": "4Gc"}, False),
    ("memory per node in ReqMem only", {"alloc_tres": "cpu=8,gres/gpu=1,node=1", "req_mem": "65536Mn"}, True),
    ("an empty ReqMem beside AllocTRES's memory", {"req_mem": ""}, True),
    ("no memory anywhere", {"alloc_tres": "cpu=8,gres/gpu=1,node=1", "req_mem": ""}, False),
    ("fewer GPUs", {"alloc_tres": "cpu=8,mem=64G,node=1"}, False),
    ("more GPUs", {"alloc_tres": "cpu=8,gres/gpu=2,mem=64G,node=1"}, False),
    ("a typed GPU", {"alloc_tres": "cpu=8,gres/gpu:h200=1,mem=64G,node=1"}, True),
    ("a longer time limit", {"timelimit": "00:20:00"}, True),
    ("no time limit", {"timelimit": "UNLIMITED"}, True),
    ("a shorter time limit", {"timelimit": "00:10:00"}, False),
    ("another partition", {"partition": "debug"}, False),
    ("another account", {"account": "other"}, False),
]


@pytest.mark.parametrize("case, row, accepted", ALLOCATIONS, ids=[c[0] for c in ALLOCATIONS])
def test_site_allocation(case, row, accepted):
    found = problems(**row)
    assert (found == []) == accepted, found


def test_no_memory_asked_accepts_what_the_site_gives_or_nothing():
    free = msgspec.structs.replace(PROFILE, mem="")
    assert problems(free, alloc_tres="cpu=8,gres/gpu=1,node=1", req_mem="") == []
    assert problems(free, alloc_tres="cpu=8,gres/gpu=1,mem=4G,node=1", req_mem="") == []
    assert problems(PROFILE, alloc_tres="cpu=8,gres/gpu=1,node=1", req_mem="") == ["mem"]


def test_allocation_message_says_what_the_profile_requires(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c512", 1) / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(
        sacct.rows[job], alloc_tres="billing=8,cpu=8,gres/gpu=1,node=1", req_mem="4Gc"
    )
    (bad,) = failures(audit(campaign, sacct), "slurm.allocation")
    assert "mem 'ReqMem 4Gc x 8 CPUs', profile requires at least 64G" in bad.message
    sacct.rows[job] = msgspec.structs.replace(
        sacct.rows[job], alloc_tres="billing=16,cpu=16,gres/gpu=1,mem=131072M,node=1"
    )
    assert not failures(audit(campaign, sacct), "slurm.allocation")


# ------------------------------------------------------------------------ end states


def _end(campaign, folder, outcome: str, state: str, exit_code: str = "0:0"):
    """The point's result says `outcome`; its job ended `state`, in the receipt and in sacct."""
    edit(folder / "result.json", lambda d: d.update(outcome={"kind": outcome, "phase": "measure"}))
    edit(folder / "receipt.json", lambda d: receipt_ended(d, state, exit_code))
    sacct = campaign.sacct()
    job = json.loads((folder / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(sacct.rows[job], state=state, exit_code=exit_code)
    return sacct


@pytest.mark.parametrize("state", ["PREEMPTED", "CANCELLED by 1001", "REVOKED"])
def test_a_job_ended_by_someone_else_is_a_cancellation_to_retry_never_a_boundary(campaign, state):
    folder = point(campaign, "20m-c512", 8)  # the curve's CUDA OOM until now
    out = audit(campaign, _end(campaign, folder, "cancelled", state))
    names = {c.name for c in failures(out)}
    assert not names & {"slurm.state", "receipt.state", "slurm.worker_times"}, names
    assert names <= {"summary.curve", "summary.fastest", "summary.unstable"}  # results.json still says bounded
    (check,) = [
        c
        for c in out.report.checks
        if c.name == "slurm.state" and c.file == "curves/20m-c512/b8/attempt-1/receipt.json"
    ]
    assert "not a boundary; retry the point with run --resume --retry-failed" in check.message
    curve = next(c for c in out.report.curves if c.curve == "20m-c512")
    assert (curve.state, curve.blocked_batch, curve.first_oom_batch) == ("blocked", 8, None)
    assert "--resume --retry-failed" in curve.blocked_reason


def test_a_preempted_job_does_not_explain_an_ok_result(campaign):
    folder = point(campaign, "20m-c512", 4)
    out = audit(campaign, _end(campaign, folder, "ok", "PREEMPTED"))
    (bad,) = failures(out, "slurm.state")
    assert "ended preempted exit 0; result.json outcome ok implies completed with exit 0" in bad.message


def test_deadline_is_a_timeout(campaign):
    folder = point(campaign, "20m-c512", 8)
    out = audit(campaign, _end(campaign, folder, "timeout", "DEADLINE"))
    assert not {c.name for c in failures(out)} & {"slurm.state", "receipt.state"}
    out = audit(campaign, _end(campaign, folder, "cancelled", "DEADLINE"))
    assert failures(out, "slurm.state")


# ----------------------------------------------------------------------------- times


def test_the_audits_sacct_runs_with_standard_time_format(monkeypatch):
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    seen = {}

    def fake_run(argv, **kwargs):
        seen.update(kwargs["env"])
        return CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(slurm.subprocess, "run", fake_run)
    slurm.query(["1"])
    assert seen["SLURM_TIME_FORMAT"] == "standard" and seen["PATH"]


@pytest.mark.parametrize("text", ["19:19:41", "Tue 19:19", "2026-10-08", "12 Oct"])
def test_a_dateless_time_is_an_error_not_absent(text):
    with pytest.raises(ValueError, match="is not a date and time"):
        job_states.job_time(text)
    # sacct's row read into the project's words keeps the text, for the checks to name.
    assert sacct.job_accounting(sacct.AccountingRow(job_id="1", start=text)).start == text


@pytest.mark.parametrize("text", ["", "Unknown", "None"])
def test_a_time_not_yet_is_absent(text):
    assert sacct.job_accounting(sacct.AccountingRow(job_id="1", start=text, end=text)).start == ""
    assert job_states.job_time("") is None


def test_dateless_job_times_fail_worker_times_and_concurrency_naming_field_and_text(campaign):
    sacct = campaign.sacct()
    sacct.rows = {j: msgspec.structs.replace(r, start=r.start[11:19], end=r.end[11:19]) for j, r in sacct.rows.items()}
    out = audit(campaign, sacct)
    times = failures(out, "slurm.worker_times")
    assert len(times) == len(sacct.rows)
    first = next(iter(sacct.rows.values()))
    assert f"start '{first.start}' is not a date and time" in times[0].message and "in sacct" in times[0].message
    (peak,) = failures(out, "slurm.peak_concurrency")
    assert peak.message.startswith(f"{len(sacct.rows)} of {len(sacct.rows)} jobs have times in sacct that do not parse")


def test_a_receipt_with_dateless_times_fails_naming_the_receipt_field_and_text(campaign):
    folder = point(campaign, "20m-c1024", 2)
    edit(folder / "receipt.json", lambda d: d["accounting"].update(start="19:19:41"))
    (bad,) = failures(audit(campaign), "receipt.times")
    assert bad.file == "curves/20m-c1024/b2/attempt-1/receipt.json"
    assert bad.message.startswith(
        "curves/20m-c1024/b2/attempt-1/receipt.json: the recorded accounting's start '19:19:41' is not a date and time"
    )


def test_worker_times_never_vanish_on_a_job_without_times(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c512", 1) / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(sacct.rows[job], start="Unknown", end="Unknown")
    (bad,) = failures(audit(campaign, sacct), "slurm.worker_times")
    assert f"job {job} has no start time in sacct, yet its worker wrote this result" in bad.message


def test_checks_that_checked_nothing_fail(campaign):
    phase = SCHEDULER_PHASE
    sacct = campaign.sacct()
    sacct.rows = {j: msgspec.structs.replace(r, start="Unknown", end="Unknown") for j, r in sacct.rows.items()}
    (peak,) = failures(audit(campaign, sacct), "slurm.peak_concurrency")
    assert "jobs running at once were counted over nothing" in peak.message
    for folder in (f for pts in campaign.points.values() for f in pts.values()):
        edit(folder / "result.json", lambda d: d["outcome"].update(phase=phase))  # all written by the controller
    nothing = [c for c in failures(audit(campaign)) if c.name == "slurm.worker_times"]
    assert [c.file for c in nothing] == [""] and "checked against nothing" in nothing[0].message


# ------------------------------------------------------------------------ accounting


def test_sacct_error_on_stderr_with_exit_0_is_accounting_not_available(campaign):
    def sacct(argv):
        return CompletedProcess(
            list(argv), 0, "", "sacct: error: Problem talking to the database: Connection refused\n"
        )

    out = audit(campaign, sacct)
    bad = failures(out)
    assert [c.name for c in bad] == ["slurm.sacct"]
    assert bad[0].message.startswith(
        "Slurm accounting not available: sacct exited 0 but said: sacct: error: Problem talking to the database: Connection refused"
    )
    assert "--no-slurm" in bad[0].message and out.report.scheduler_accounting == "not_available"


def test_sacct_stderr_without_an_error_is_not_a_failure(campaign):
    rows = campaign.sacct()

    def sacct(argv):
        answer = rows(argv)
        return CompletedProcess(answer.args, 0, answer.stdout, "sacct: note: using the default cluster\n")

    out = audit(campaign, sacct)
    assert failures(out) == [] and out.report.scheduler_accounting == "checked"


def test_the_command_line_shows_a_preempted_point_with_its_retry_command(campaign, capsys, monkeypatch):
    from throughput_audit import cli

    sacct = _end(campaign, point(campaign, "20m-c512", 8), "cancelled", "PREEMPTED")
    monkeypatch.setattr(slurm, "_run", sacct)
    cli.main(["--output", str(campaign.root)])
    shown = capsys.readouterr().out
    assert (
        "20m-c512 blocked: batch 8 (curves/20m-c512/b8/attempt-1) ended cancelled by someone else, not a boundary: "
        f"retry it with throughput-sweep run --output {campaign.root} --resume --retry-failed"
    ) in shown
