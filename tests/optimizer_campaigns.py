"""Building real campaigns through the local Slurm with the scripted worker, for the
optimizer follow-up and report tests: a throughput campaign, then an optimizer-timing
follow-up of it; plus the audit and report command lines and a byte snapshot.

Uses `campaign_helpers` (profiles, plans, the sweep command line) for everything shared
with the controller's other real-Slurm tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from campaign_helpers import BLOCKED, ROOT, sweep, write_plan

# Fast jobs: the scripted worker's clock is modelled, so only its sleep and Python start cost time.
OK_SECONDS = 0.1
FAST = ["--window-seconds", "1", "--warmup", "20", "--poll-max-seconds", "1", "--no-progress"]


def local_profile(tmp_path: Path, name: str = "local-slurm-test", **changes) -> Path:
    """The repository's local-Slurm profile (the resources the audit checks against sacct),
    with the scheduler-side Python of this test run and any `changes`."""
    import yaml

    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    raw.update(name=name, python=sys.executable, **changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def plan_file(tmp_path: Path, points: dict, name: str = "plan.json") -> Path:
    path = write_plan(tmp_path, points, ok_seconds=OK_SECONDS)
    if name != path.name:
        path = path.rename(tmp_path / name)
    return path


def checked(proc: subprocess.CompletedProcess, what: str, rc: int = 0) -> subprocess.CompletedProcess:
    assert proc.returncode == rc, f"{what}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def throughput_campaign(out: Path, plan: Path, profile: Path, *, models=("20m",), contexts=(512, 1024)) -> Path:
    """`throughput-sweep run` to completion, then `collect`."""
    checked(
        sweep(
            "run",
            "--output",
            out,
            "--models",
            *models,
            "--contexts",
            *map(str, contexts),
            "--profile",
            profile,
            "--worker",
            "scripted_worker",
            *FAST,
            plan=plan,
        ),
        f"throughput campaign {out.name}",
    )
    checked(sweep("collect", "--output", out, plan=plan), f"collect {out.name}")
    return out


def optimizer_campaign(
    parent: Path, out: Path, plan: Path, profile: Path, *, parallel: bool = False, blocked: bool = False
) -> subprocess.CompletedProcess:
    """`throughput-sweep run --optimizer-timing-from PARENT` to its end; `blocked`: it ends with blocked curves."""
    return checked(
        sweep(
            "run",
            "--optimizer-timing-from",
            parent,
            "--output",
            out,
            "--profile",
            profile,
            *(["--parallel-optimizer-points"] if parallel else []),
            "--worker",
            "scripted_worker",
            "--poll-max-seconds",
            "1",
            "--no-progress",
            plan=plan,
        ),
        f"optimizer campaign {out.name}",
        rc=BLOCKED if blocked else 0,
    )


def resume_retry(out: Path, plan: Path) -> subprocess.CompletedProcess:
    return checked(
        sweep(
            "run", "--output", out, "--resume", "--retry-failed", "--poll-max-seconds", "1", "--no-progress", plan=plan
        ),
        f"resume --retry-failed {out.name}",
    )


def status(out: Path) -> str:
    proc = sweep("status", "--output", out)
    assert proc.returncode in (0, BLOCKED), f"status {out.name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def collect(out: Path) -> None:
    checked(sweep("collect", "--output", out), f"collect {out.name}")


# sacct's answer while slurmdbd is down (the fault tests stop and restart it on the shared
# local cluster): the audit rightly fails then; it is asked again once the database is back.
DATABASE_DOWN = "Problem talking to the database"


def audit(
    out: Path | str, *, cwd: Path = ROOT, attempts: int = 6, wait_seconds: float = 10.0
) -> subprocess.CompletedProcess:
    """`throughput-audit --output OUT --allow-test-worker` (every campaign here is the scripted
    worker's) run in `cwd`; rerun while the only trouble is an unreachable slurmdbd."""
    for _ in range(attempts):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts/throughput_audit.py"), "--output", str(out), "--allow-test-worker"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
        )
        failures = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
        if not failures or not all(DATABASE_DOWN in line for line in failures):
            return proc
        time.sleep(wait_seconds)
    return proc


def report(throughput: list[Path], optimizer: list[Path], out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/throughput_report.py"),
            "--throughput",
            *map(str, throughput),
            "--optimizer",
            *map(str, optimizer),
            "--output",
            str(out),
            "--allow-test-worker",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fitting(campaign: Path) -> dict[str, list[int]]:
    """Each curve's fitting batches as the campaign's collected results.json says."""
    return {c["curve"]: c["fitting_batches"] for c in json.loads((campaign / "results.json").read_text())["curves"]}


def pair(tmp_path: Path, *, contexts=(512,), oom_at: int = 4, parallel: bool = True) -> tuple[Path, Path]:
    """A complete throughput campaign of 20m (CUDA OOM at `oom_at` on every curve) and its
    complete optimizer follow-up, both collected."""
    profile = local_profile(tmp_path)
    plan = plan_file(tmp_path, {f"20m-c{c}-b{oom_at}": "cuda_oom" for c in contexts}, name="pair-plan.json")
    parent = throughput_campaign(tmp_path / "throughput", plan, profile, contexts=contexts)
    child = tmp_path / "optimizer"
    optimizer_campaign(parent, child, plan, profile, parallel=parallel)
    collect(child)
    return parent, child
