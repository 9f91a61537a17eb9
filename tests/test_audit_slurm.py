"""The audit against a real Slurm: jobs submitted with real sbatch, read back with real sacct.

Needs the local cluster of tools/local-slurm.sh (fixture `local_slurm`). A campaign built
on disk gets its receipts pointed at real jobs submitted with the profile's resources and
exiting as the recorded outcomes say; the audit passes. Then one receipt is pointed at a
real job with other resources (--cpus-per-task=2) and the audit must catch it, and the
job it named before, which no receipt names now. A controller campaign must audit clean,
then fail for a second job submitted under one of its tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from campaign_builder.complete import build_throughput
from campaign_helpers import run_program
from throughput_audit import slurm
from throughput_audit.audit import run_audit, write_outputs
from throughput_schema import ClusterProfile, Receipt, SubmissionIntent, WorkerResult, read, write_atomic
from throughput_slurm.sacct import job_accounting

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]

ROOT = Path(__file__).resolve().parents[1]

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


def sbatch(*args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


def wait_accounted(job_ids: list[str], timeout: float = 120.0) -> dict[str, slurm.AccountingRow]:
    """Until every job has ended and its sacct row is complete (sacct lags a few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        rows, _ = slurm.query(job_ids)
        done = [
            j
            for j in job_ids
            if j in rows
            and rows[j].state.split()[0] in TERMINAL
            and rows[j].partition
            and rows[j].job_name != "allocation"
        ]
        if len(done) == len(job_ids):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not accounted after {timeout} s: {sorted(set(job_ids) - set(done))}")
        time.sleep(1.0)


def submit_campaign_jobs(built) -> dict[Path, str]:
    """Resubmit every attempt as a real job with the profile's resources; rewrite receipts."""
    p = built.manifest.profile
    jobs = {}
    for points in built.points.values():
        for folder in points.values():
            receipt = read(folder / "receipt.json", Receipt)
            code = str(receipt.accounting.exit_code)
            # The intent was written just before its job, as the controller's are: the
            # audit looks for the token's jobs around that time.
            intent = read(folder / "intent.json", SubmissionIntent)
            write_atomic(
                folder / "intent.json", msgspec.structs.replace(intent, created_at=datetime.now(UTC).isoformat())
            )
            job = sbatch(
                f"--job-name={receipt.token}",
                f"--comment={receipt.token}",
                *([f"--account={p.account}"] if p.account else []),
                *([f"--partition={p.partition}"] if p.partition else []),
                f"--gpus={p.gpus_per_job}",
                f"--cpus-per-task={p.cpus_per_task}",
                f"--mem={p.mem}",
                f"--time={p.time_limit_minutes}",
                f"--output={folder}/slurm-%j.out",
                f"--wrap=sleep 1; exit {code}",
            )
            jobs[folder] = job
    rows = wait_accounted(list(jobs.values()))
    for folder, job in jobs.items():
        point_at(folder, read(folder / "receipt.json", Receipt), rows[job])
    return jobs


def point_at(folder: Path, receipt: Receipt, row: slurm.AccountingRow) -> None:
    """The attempt's receipt names this job, with its final accounting; the result is
    timed as the job ran, as if the job had been the worker's."""
    write_atomic(
        folder / "receipt.json",
        msgspec.structs.replace(receipt, job_id=row.job_id, accounting=job_accounting(row), accounting_final=True),
    )
    result = read(folder / "result.json", WorkerResult)
    write_atomic(folder / "result.json", msgspec.structs.replace(result, started_at=row.start, finished_at=row.end))


# The built results model a worker's 90 s in a job that really slept 1 s: whether a job held
# what ran in it is the planted faults' and the real campaigns' question, not these tests'.
MODELLED_TIMES = "setup.inside_run"


def real_job_fails(out) -> list:
    """The failed checks, less the one that compares modelled worker times with real jobs."""
    return [c for c in out.report.checks if c.status == "fail" and c.name != MODELLED_TIMES]


def local_profile():
    """The repository's local-Slurm profile when present, else the cluster script's defaults."""
    path = ROOT / "configs" / "clusters" / "local-slurm.yaml"
    if path.is_file():
        import yaml

        raw = yaml.safe_load(path.read_text())
        raw.setdefault("name", "local-slurm")
        return msgspec.convert(raw, ClusterProfile)
    return ClusterProfile(name="local-slurm", scheduler="slurm", account="throughput", partition="gpu")


@pytest.fixture
def real_campaign(local_slurm, tmp_path):
    built = build_throughput(tmp_path / "real", contexts=(512, 1024), first_oom=4)
    profile = local_profile()
    manifest = msgspec.structs.replace(built.manifest, profile=profile)
    write_atomic(built.root / "manifest.json", manifest)
    built.manifest = manifest
    jobs = submit_campaign_jobs(built)
    return built, jobs


def test_audit_passes_on_real_jobs_and_catches_a_job_with_other_resources(real_campaign):
    built, jobs = real_campaign
    out = run_audit(built.root, settle_seconds=20)
    write_outputs(built.root, out)
    failed = real_job_fails(out)
    assert failed == [], [c.message for c in failed]
    assert out.report.scheduler_accounting == "checked"
    # Each measured job's real elapsed time, as sacct gave it, cannot hold the 89 s or more its
    # result models; the CUDA OOM points' results spent nothing that was timed.
    timing = {c.file: c for c in out.report.checks if c.name == MODELLED_TIMES}
    assert len(timing) == 6 and all(c.values["elapsed_seconds"] < 30 for c in timing.values())
    oom = {f for f in timing if "/b4/" in f}
    assert len(oom) == 2 and all(timing[f].status == "pass" for f in oom)
    assert all(c.status == "fail" and c.values["spent_seconds"] > 85 for f, c in timing.items() if f not in oom)
    queries = next(c for c in out.report.checks if c.name == "slurm.queries")
    assert queries.values == {"jobs": 6, "queries": 1, "rereads": 0}
    accounting = (built.root / "accounting.txt").read_text()
    assert all(job in accounting for job in jobs.values()) and "gres/gpu=1" in accounting
    # This Slurm records no energy: said for every job, never a silent pass.
    energy = [c for c in out.report.checks if c.name == "slurm.energy"]
    assert len(energy) == 6 and {c.status for c in energy} == {"not_applicable"}
    assert all("not applicable: the cluster records no energy" in c.message for c in energy)
    assert any(line.startswith("JobID|") and "|ConsumedEnergyRaw|" in line for line in accounting.splitlines())

    # A receipt pointing at a real job with other resources.
    folder = built.points["20m-c512"][2]
    receipt = read(folder / "receipt.json", Receipt)
    other = sbatch(
        f"--job-name={receipt.token}",
        f"--comment={receipt.token}",
        *([f"--account={built.manifest.profile.account}"] if built.manifest.profile.account else []),
        *([f"--partition={built.manifest.profile.partition}"] if built.manifest.profile.partition else []),
        "--gpus=1",
        "--cpus-per-task=2",
        "--mem=2G",
        f"--time={built.manifest.profile.time_limit_minutes}",
        f"--output={folder}/slurm-%j.out",
        "--wrap=sleep 1",
    )
    row = wait_accounted([other])[other]
    point_at(folder, receipt, row)
    out = run_audit(built.root, settle_seconds=20)
    failed = real_job_fails(out)
    # The job the receipt named before carries the token still, with no receipt now.
    assert [c.name for c in failed] == ["slurm.allocation", "slurm.unreceipted"]
    msg = failed[0].message
    assert msg.startswith(f"curves/20m-c512/b2/attempt-1/receipt.json: job {other} ")
    assert "cpu '2', profile requires at least 8" in msg and "mem '2G', profile requires at least 64G" in msg
    assert failed[1].values["job_id"] == jobs[folder]


def test_job_unknown_to_accounting_is_a_finding(real_campaign):
    built, jobs = real_campaign
    folder = built.points["20m-c1024"][1]
    receipt = read(folder / "receipt.json", Receipt)
    missing = str(int(max(jobs.values(), key=int)) + 100000)
    write_atomic(folder / "receipt.json", msgspec.structs.replace(receipt, job_id=missing))
    out = run_audit(built.root, settle_seconds=0)
    failed = real_job_fails(out)
    assert [c.name for c in failed] == ["slurm.accounted", "slurm.unreceipted"]
    assert (
        failed[0].message
        == f"curves/20m-c1024/b1/attempt-1/receipt.json: job {missing} is missing from Slurm accounting"
    )
    assert failed[1].values["job_id"] == jobs[folder]  # the job the receipt named before


# ------------------------------------------------------------------ a controller campaign


def sweep(*args: str, plan: Path) -> subprocess.CompletedProcess[str]:
    """The installed `throughput-sweep` entry point, where there is one."""
    exe = Path(sys.executable).parent / "throughput-sweep"
    return run_program([str(exe)] if exe.exists() else [sys.executable, "-m", "throughput_sweep.cli"], *args, plan=plan)


def test_audit_of_a_controller_campaign_run_on_slurm(local_slurm, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"default": "ok", "ok_seconds": 0.1, "points": {"20m-c512-b4": "cuda_oom", "20m-c1024-b2": "cuda_oom"}}
        )
    )
    camp = tmp_path / "camp"
    run = sweep(
        "run",
        "--output",
        str(camp),
        "--profile",
        str(local_slurm.profile_path),
        "--models",
        "20m",
        "--contexts",
        "512",
        "1024",
        "--worker",
        str(ROOT / "tests" / "scripted_worker.py"),
        "--poll-max-seconds",
        "1",
        "--no-progress",
        plan=plan,
    )
    if run.returncode == 2 and "not implemented" in run.stderr:
        pytest.skip("throughput-sweep run is not implemented yet")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sweep("collect", "--output", str(camp), plan=plan).returncode == 0

    out = run_audit(camp, settle_seconds=20, allow_test_worker=True)
    write_outputs(camp, out)
    failed = [c for c in out.report.checks if c.status == "fail"]
    assert failed == [], [c.message for c in failed]
    assert out.report.scheduler_accounting == "checked"
    curves = {c.curve: (c.state, c.largest_fitting_batch, c.first_oom_batch) for c in out.report.curves}
    assert curves == {"20m-c512": ("bounded", 2, 4), "20m-c1024": ("bounded", 1, 2)}
    assert {c.name for c in out.report.checks if c.name.startswith("summary.")} >= {"summary.curve", "summary.fastest"}
    peak = next(c for c in out.report.checks if c.name == "slurm.peak_concurrency")
    assert 1 <= peak.values["peak"] <= 12
    p = out_profile = msgspec.json.decode((camp / "manifest.json").read_bytes())["profile"]
    unreceipted = next(c for c in out.report.checks if c.name == "slurm.unreceipted")
    assert unreceipted.values["jobs"] == unreceipted.values["tokens"] == 5  # c512 b1 b2 b4, c1024 b1 b2

    # A second job under one attempt's token (a duplicate sbatch), which no receipt names.
    first = camp / "curves" / "20m-c1024" / "b1" / "attempt-1"
    first_receipt = read(first / "receipt.json", Receipt)
    extra = sbatch(
        f"--job-name={first_receipt.token}",
        f"--account={p['account']}",
        f"--partition={p['partition']}",
        "--cpus-per-task=1",
        "--mem=100M",
        "--time=1",
        f"--output={tmp_path}/extra-%j.out",
        "--wrap=true",
    )
    extra_row = wait_accounted([extra])[extra]
    out = run_audit(camp, settle_seconds=20, allow_test_worker=True)
    failed = [c for c in out.report.checks if c.status == "fail"]
    assert [c.message for c in failed] == [
        f"curves/20m-c1024/b1/attempt-1/intent.json: job {extra} ({first_receipt.token}) was submitted without a receipt "
        f"in the campaign (sacct: COMPLETED, start {extra_row.start}); the attempt's receipt names job {first_receipt.job_id}"
    ]
    assert failed[0].name == "slurm.unreceipted"

    # A receipt's job id pointing at a real job with other resources.
    folder = camp / "curves" / "20m-c512" / "b2" / "attempt-1"
    receipt = read(folder / "receipt.json", Receipt)
    other = sbatch(
        f"--job-name={receipt.token}",
        f"--comment={receipt.token}",
        f"--account={p['account']}",
        f"--partition={p['partition']}",
        "--gpus=1",
        "--cpus-per-task=2",
        f"--mem={out_profile['mem']}",
        f"--time={p['time_limit_minutes']}",
        f"--output={tmp_path}/other-%j.out",
        "--wrap=sleep 1",
    )
    row = wait_accounted([other])[other]
    point_at(folder, receipt, row)
    assert sweep("collect", "--output", str(camp), plan=plan).returncode == 0  # publishing the other job
    out = run_audit(camp, settle_seconds=20, allow_test_worker=True)
    failed = [c for c in out.report.checks if c.status == "fail"]
    assert [c.name for c in failed] == ["slurm.allocation", "slurm.unreceipted", "slurm.unreceipted"]
    assert failed[0].file == "curves/20m-c512/b2/attempt-1/receipt.json"
    assert f"job {other} cpu '2', profile requires at least 8" in failed[0].message
    # The job the receipt named before, and the duplicate.
    assert sorted(c.values["job_id"] for c in failed[1:]) == sorted([receipt.job_id, extra], key=int)
