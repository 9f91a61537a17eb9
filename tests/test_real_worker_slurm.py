"""The production path on the project's real Slurm, with the real tiny_llm worker (CPU).

What a cluster user runs, as the guide (docs/guide.md) writes it: the profile chosen once in the
environment, the guide's driver with a relative --output from the user's own folder,
a throughput campaign to its cap, the optimizer follow-up, collect, the audit with its
sacct checks, and the report. Every line of that path runs except CUDA.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import ROOT
from optimizer_campaigns import audit

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.slurm2411]

# Tiny shapes and short windows; each job still starts Python, imports torch and trains.
PROTOCOL = ["--window-seconds", "0.5", "--warmup", "2", "--windows", "3"]
DRIVERS = ROOT / "scripts"


def one_cpu_profile(folder: Path) -> Path:
    """local-slurm with one CPU per job, chosen by path as a user may choose any profile.

    The test Slurm's node declares more CPUs than the machine has and binds none, so the
    follow-up's baseline and instrumented jobs share the test machine's cores. Eight
    OpenMP threads each (or even two on two cores) turn the timing windows into a measure
    of contention: updates 13x slower while the other job runs, figures that disagree.
    """
    text = (ROOT / "configs/clusters/local-slurm.yaml").read_text()
    text = text.replace("name: local-slurm", "name: local-slurm-one-cpu").replace(
        "cpus_per_task: 8", "cpus_per_task: 1"
    )
    assert "cpus_per_task: 1" in text and "local-slurm-one-cpu" in text
    path = folder / "local-slurm-one-cpu.yaml"
    path.write_text(text)
    return path


def guide(cwd: Path, driver: str, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, THROUGHPUT_SWEEP_PROFILE=str(one_cpu_profile(cwd)))
    env.pop("PYTHONPATH", None)  # nothing of the tests' own: the frozen sources run the jobs
    return subprocess.run(
        [sys.executable, str(DRIVERS / driver), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture
def cores_to_itself():
    """One real-worker campaign at a time on this machine, whichever Slurm runs it.

    CI runs this test on 22.05 and on 24.11 side by side; two campaigns timing CPU updates
    on two cores at once would audit each other's contention (a primary optimizer share
    above 100%), not the tool.
    """
    with open("/tmp/throughput-sweeps-real-worker.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def test_real_worker_through_real_slurm_from_campaign_to_report(local_slurm, cores_to_itself, tmp_path):
    ok(
        guide(
            tmp_path,
            "throughput_sweep.py",
            "run",
            "--output",
            "runs/tp",
            "--models",
            "tiny",
            "--contexts",
            "128",
            "--max-batch",
            "2",
            *PROTOCOL,
            "--no-progress",
        ),
        "throughput campaign",
    )
    tp = tmp_path / "runs/tp"
    manifest = json.loads((tp / "manifest.json").read_text())
    assert manifest["profile"]["name"] == "local-slurm-one-cpu" and manifest["profile"]["scheduler"] == "slurm"
    assert manifest["worker"] == "tiny_llm"
    results = [json.loads(p.read_text()) for p in sorted(tp.glob("curves/tiny-c128/b*/attempt-1/result.json"))]
    assert [r["outcome"]["kind"] for r in results] == ["ok", "ok"]
    assert all(r["throughput"]["tokens_per_second"] > 0 and r["recipe"]["name"] == "tiny" for r in results)
    receipts = [json.loads(p.read_text()) for p in sorted(tp.glob("curves/*/b*/attempt-*/receipt.json"))]
    assert all(r["scheduler"] == "slurm" and r["accounting_final"] for r in receipts)
    assert all(r["accounting"]["state"] == "completed" for r in receipts)

    # The follow-up takes its parent's profile; it is chosen nowhere else.
    ok(
        guide(
            tmp_path,
            "throughput_sweep.py",
            "run",
            "--optimizer-timing-from",
            "runs/tp",
            "--output",
            "runs/opt",
            "--parallel-optimizer-points",
            "--no-progress",
        ),
        "optimizer follow-up",
    )
    opt = tmp_path / "runs/opt"
    assert json.loads((opt / "manifest.json").read_text())["profile"]["name"] == "local-slurm-one-cpu"
    for point in sorted(opt.glob("curves/tiny-c128/b*/attempt-1")):
        assert json.loads((point / "baseline.json").read_text())["outcome"]["kind"] == "ok", point
        timed = json.loads((point / "result.json").read_text())
        assert timed["outcome"]["kind"] == "ok" and timed["optimizer_timing"]["optimizer_ms"] > 0, point
        assert (point / "bursts.jsonl").stat().st_size > 0

    for name in ("runs/tp", "runs/opt"):
        ok(guide(tmp_path, "throughput_sweep.py", "status", "--output", name), f"status {name}")
        ok(guide(tmp_path, "throughput_sweep.py", "collect", "--output", name), f"collect {name}")
        proc = audit(name, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert "the scheduler's accounting checked" in proc.stdout, proc.stdout[-2000:]
    ok(
        guide(
            tmp_path,
            "throughput_report.py",
            "--throughput",
            "runs/tp",
            "--optimizer",
            "runs/opt",
            "--output",
            "runs/report",
            timeout=600,
        ),
        "report",
    )
    assert (tmp_path / "runs/report/report.pdf").stat().st_size > 10_000
