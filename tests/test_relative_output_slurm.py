"""The guide's (docs/guide.md) commands with a relative --output, run from a folder that is not the
repository, on the real local Slurm: every path handed to Slurm must be absolute, or
Slurm resolves --output inside --chdir and fails every job before its script starts.

Also: a campaign that ends with blocked curves exits 3 (run and status) and prints the
retry command; a job Slurm fails before its script starts gets a result that says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import BLOCKED, ROOT, SWEEP, run_program, write_plan
from optimizer_campaigns import audit, local_profile

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAST = ["--window-seconds", "1", "--poll-max-seconds", "1", "--no-progress"]


def in_folder(cwd: Path, program: list[str], *args, plan: Path | None = None) -> subprocess.CompletedProcess:
    return run_program(program, *args, plan=plan, cwd=cwd, timeout=600)


def sweep(cwd: Path, *args, plan: Path | None = None, rc: int = 0) -> subprocess.CompletedProcess:
    return run_program(SWEEP, *args, plan=plan, cwd=cwd, timeout=600, rc=rc)


@pytest.mark.slurm2411
def test_relative_output_from_another_folder_run_resume_follow_up_collect_audit_report(local_slurm, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    prof = local_profile(tmp_path)
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom", "20m-c1024-b2@1": "compile_error"}, ok_seconds=0.1)

    first = sweep(
        work,
        "run",
        "--output",
        "runs/rel",
        "--models",
        "20m",
        "--contexts",
        "512",
        "1024",
        "--profile",
        prof,
        "--worker",
        "scripted_worker",
        "--max-batch",
        "4",
        *FAST,
        plan=plan,
        rc=BLOCKED,
    )
    camp = work / "runs/rel"
    assert "--resume --retry-failed" in first.stderr and "blocked curves: 20m-c1024" in first.stderr
    assert "write the report" not in first.stderr
    outs = sorted(p.relative_to(camp).as_posix() for p in camp.glob("curves/*/b*/attempt-*/slurm-*.out"))
    assert len(outs) == 5, outs  # every job's script started and wrote its log
    results = {
        p.parent.relative_to(camp).as_posix(): json.loads(p.read_text())["outcome"]["kind"]
        for p in camp.glob("curves/*/b*/attempt-*/result.json")
    }
    assert results == {
        "curves/20m-c512/b1/attempt-1": "ok",
        "curves/20m-c512/b2/attempt-1": "ok",
        "curves/20m-c512/b4/attempt-1": "cuda_oom",
        "curves/20m-c1024/b1/attempt-1": "ok",
        "curves/20m-c1024/b2/attempt-1": "compile_error",
    }
    status = sweep(work, "status", "--output", "runs/rel", rc=BLOCKED).stdout
    assert status.splitlines()[0].endswith("ended with blocked curves")

    sweep(work, "run", "--output", "runs/rel", "--resume", "--retry-failed", *FAST[2:], plan=plan)
    assert sweep(work, "status", "--output", "runs/rel").stdout.splitlines()[0].endswith("complete")

    plan = write_plan(tmp_path, {}, ok_seconds=0.1)  # the failure above was planned for attempt 1 of any campaign
    sweep(
        work,
        "run",
        "--optimizer-timing-from",
        "runs/rel",
        "--output",
        "runs/rel-opt",
        "--profile",
        prof,
        "--worker",
        "scripted_worker",
        *FAST[2:],
        plan=plan,
    )
    opt = work / "runs/rel-opt"
    assert json.loads((opt / "manifest.json").read_text())["parent"]["path"] == str(camp)
    assert len(list(opt.glob("curves/*/b*/attempt-*/baseline.json"))) == 5

    for name in ("runs/rel", "runs/rel-opt"):
        sweep(work, "collect", "--output", name)
        proc = audit(name, cwd=work)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "the scheduler's accounting checked" in proc.stdout, proc.stdout[-2000:]
    report = in_folder(
        work,
        [sys.executable, str(ROOT / "scripts/throughput_report.py")],
        "--throughput",
        "runs/rel",
        "--optimizer",
        "runs/rel-opt",
        "--output",
        "runs/rel-report",
        "--allow-test-worker",
    )
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert (work / "runs/rel-report/report.pdf").stat().st_size > 10_000


def test_a_job_slurm_fails_before_its_script_starts_says_so_and_names_the_path(local_slurm, tmp_path):
    # A later --output in the profile's extra arguments wins over ours: a folder the node lacks.
    missing = tmp_path / "no-such-folder"
    prof = local_profile(tmp_path, extra_submit_args=[f"--output={missing}/slurm-%j.out"])
    plan = write_plan(tmp_path, {}, ok_seconds=0.1)
    sweep(
        tmp_path,
        "run",
        "--output",
        "camp",
        "--models",
        "20m",
        "--contexts",
        "512",
        "--profile",
        prof,
        "--worker",
        "scripted_worker",
        "--max-batch",
        "1",
        *FAST,
        plan=plan,
        rc=BLOCKED,
    )
    result = json.loads((tmp_path / "camp/curves/20m-c512/b1/attempt-1/result.json").read_text())
    message = result["outcome"]["message"]
    assert result["outcome"]["kind"] == "crashed"
    assert "before its batch script started" in message, message
    assert f"{missing}/slurm-" in message, message
