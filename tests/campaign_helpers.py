"""Shared helpers for the controller's real-Slurm tests: profiles, plans, running the CLI,
reading sacct, and the one checker every fault case ends with (`check_campaign`); and the
scripted-worker `run` arguments (`scripted_run`) that the local-scheduler tests share too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import yaml

from throughput_schema import outcome_kind
from throughput_sweep.exit_statuses import EXIT_BLOCKED

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [sys.executable, str(ROOT / "scripts/throughput_sweep.py")]
LOCAL_SLURM = ROOT / "tools/local-slurm.sh"
BLOCKED = EXIT_BLOCKED


def watching(poll_max: int = 2, *, progress: bool = False) -> list[str]:
    """How the tests watch a campaign, run or resumed: polls at most `poll_max` s apart, no
    progress line unless `progress`."""
    return ["--poll-max-seconds", str(poll_max), *([] if progress else ["--no-progress"])]


def _scripted(poll_max: int, progress: bool = False) -> list[str]:
    return ["--worker", "scripted_worker", "--window-seconds", "1", *watching(poll_max, progress=progress)]


# The fault tests' pace: the scripted worker with one-second windows, watched at watching(2).
WATCH = watching()
FAST = _scripted(2)


def profile(tmp_path: Path, filename: str = "profile.yaml", **changes) -> Path:
    """A copy of the local-slurm profile with short test limits (and `changes`): a hung job
    is stopped by its watchdog after a minute, a minute inside Slurm's limit, as in production.
    Its jobs write on the watcher's own filesystem, so a missing result is waited for 2 s only."""
    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    raw.update(
        name="local-slurm-test", time_limit_minutes=2, watchdog_minutes=1, python=sys.executable, result_grace_seconds=2
    )
    raw.update(changes)
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(raw))
    return path


def sweep_env(plan: Path | None, crash: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    if plan is not None:
        env["SCRIPTED_WORKER_PLAN"] = str(plan)
    env.pop("THROUGHPUT_SWEEP_CRASH_AT", None)
    if crash:
        env["THROUGHPUT_SWEEP_CRASH_AT"] = crash
    return env


def run_program(
    program: list[str],
    *args,
    plan: Path | None = None,
    crash: str | None = None,
    cwd: Path = ROOT,
    env: dict | None = None,
    timeout: float = 400,
    rc: int | None = None,
    output: int | None = None,
) -> subprocess.CompletedProcess:
    """`PROGRAM ARGS` in `cwd` to completion, with the scripted worker importable and following
    `plan` (and `env`'s variables on top); with `rc`, its exit status must be that. Its stdout
    and stderr are captured, or with `output` (a file descriptor) both go there."""
    streams = {"capture_output": True} if output is None else {"stdout": output, "stderr": output}
    proc = subprocess.run(
        [*program, *map(str, args)],
        cwd=cwd,
        env={**sweep_env(plan, crash), **(env or {})},
        text=True,
        timeout=timeout,
        **streams,
    )
    if rc is not None:
        assert proc.returncode == rc, proc.stdout + proc.stderr
    return proc


def sweep(*args, **options) -> subprocess.CompletedProcess:
    """`throughput-sweep ARGS` through the driver script, to completion (options: run_program's)."""
    return run_program(SWEEP, *args, **options)


def scripted_campaign(out: Path, profile: str | Path, plan: Path) -> Path:
    """A finished and collected campaign of 20m at context 512 by the scripted worker."""
    run = (
        "run",
        "--output",
        out,
        "--profile",
        profile,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--worker",
        "scripted_worker",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "1",
        "--no-progress",
    )
    for args in (run, ("collect", "--output", out)):
        proc = sweep(*args, plan=plan)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def scripted_run(
    output: Path,
    *contexts: int,
    max_batch: int | None = None,
    profile: str | Path | None = None,
    poll_max: int = 2,
    timing_from: Path | None = None,
    models: tuple[str | Path, ...] = ("20m",),
    progress: bool = False,
) -> list:
    """`run`'s arguments for a campaign by the scripted worker, watched at `watching(poll_max,
    progress=progress)`, under `profile` where given: `models` (20m) at `contexts` (up to
    `max_batch`) with one-second windows, or with `timing_from` an optimizer follow-up of that campaign."""
    where = ["run", "--output", output, *(["--profile", profile] if profile is not None else [])]
    if timing_from is not None:  # it measures with its parent's protocol: no windows of its own
        return [
            *where,
            "--optimizer-timing-from",
            timing_from,
            "--worker",
            "scripted_worker",
            *watching(poll_max, progress=progress),
        ]
    grid = ["--models", *models, "--contexts", *map(str, contexts)]
    if max_batch is not None:
        grid += ["--max-batch", str(max_batch)]
    return [*where, *grid, *_scripted(poll_max, progress)]


def start_sweep(
    *args, plan: Path | None = None, log: Path, crash: str | None = None, env: dict | None = None
) -> subprocess.Popen:
    """`throughput-sweep ARGS` in the background (stdout+stderr to `log`), for faults mid-run."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [*SWEEP, *map(str, args)],
            cwd=ROOT,
            env={**sweep_env(plan, crash), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def only_failure(checks, name: str, file: str):
    """The one failed check of an audit with one planted fault: its name and file as given."""
    failed = [c for c in checks if c.status == "fail"]
    assert [(c.name, c.file) for c in failed] == [(name, file)], [c.message for c in failed]
    assert failed[0].message.startswith(f"{file}: ")
    return failed[0]


def recollect(campaign: Path) -> None:
    proc = sweep("collect", "--output", campaign)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def late_finish_is_caught(audit, campaign: Path, point: Path, scheduler: str) -> None:
    """A result's `finished_at` moved an hour past its job's end fails `<scheduler>.worker_times` alone.
    `audit(campaign)` gives the audit's checks."""
    from campaign_builder.files import finish_late

    finish_late(campaign / point / "result.json")
    bad = only_failure(audit(campaign), f"{scheduler}.worker_times", f"{point}/result.json")
    assert "finished_at " in bad.message and "lies outside the job's" in bad.message


def receipt_edit_is_caught(audit, campaign: Path, point: Path, scheduler: str, field: str, value: object) -> None:
    """A field of the receipt's accounting copy edited fails `<scheduler>.receipt_accounting` alone."""
    from campaign_builder.files import edit_receipt_accounting

    before = edit_receipt_accounting(campaign / point / "receipt.json", **{field: value})
    recollect(campaign)  # so that the edited figure is the one published
    bad = only_failure(audit(campaign), f"{scheduler}.receipt_accounting", f"{point}/receipt.json")
    source = "sacct" if scheduler == "slurm" else "the local job registry"
    assert f"{field} {value!r}, {source} says {getattr(before, field)!r}" in bad.message


def write_plan(tmp_path: Path, points: dict, ok_seconds: float = 0.2) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"default": "ok", "ok_seconds": ok_seconds, "points": points}))
    return path


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def receipts(campaign: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(campaign.glob("curves/*/b*/attempt-*/receipt.json"))]


def job_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    return out


def slurm_tool(*args: str) -> None:
    """tools/local-slurm.sh ARGS (stop-daemon/start-daemon/start), checked."""
    subprocess.run([str(LOCAL_SLURM), *args], check=True, capture_output=True, text=True, timeout=300)


def sacct_jobs(since: datetime) -> list[dict]:
    out = subprocess.run(
        [
            "sacct",
            "-X",
            "-n",
            "--parsable2",
            f"-S{since:%Y-%m-%dT%H:%M:%S}",
            "-Enow",
            "--format=JobID,JobName,State,Start,End",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        job_id, name, state, start, end = line.split("|")
        rows.append(dict(job_id=job_id, name=name, state=state, start=start, end=end))
    return rows


def intents(campaign: Path) -> dict[tuple[str, int], list[str]]:
    """(curve, batch) -> the tokens of every attempt at that point."""
    found: dict[tuple[str, int], list[str]] = {}
    for path in campaign.glob("curves/*/b*/attempt-*/intent.json"):
        token = json.loads(path.read_text())["token"]
        found.setdefault((path.parents[2].name, int(path.parents[1].name[1:])), []).append(token)
    return found


def _settlement(attempt: Path) -> str:
    path = attempt / "settlement.json"
    return json.loads(path.read_text())["state"] if path.exists() else ""


def _job_counts(campaign: Path, since: datetime) -> tuple[dict[Path, int], list[str]]:
    names = [r["name"] for r in sacct_jobs(since)]
    counts = {}
    for path in campaign.glob("curves/*/b*/attempt-*/intent.json"):
        counts[path.parent] = names.count(json.loads(path.read_text())["token"])
    return counts, names


def assert_exactly_one_job_per_point(campaign: Path, since: datetime, settle_seconds: float = 20) -> None:
    """Each attempt has exactly one job in sacct (none when settled as never submitted or refused);
    a point has at most one attempt that did not fail, so no point is ever measured twice; every
    finished job has a result."""

    def expected(attempt: Path) -> tuple[int, ...]:
        state = _settlement(attempt)
        if state == "never-submitted":
            return (0,)
        if state == "refused":
            return (0, 1)  # Slurm may keep a FAILED record of a refused submission
        return (1,)

    deadline = time.monotonic() + settle_seconds  # accounting can lag after a slurmdbd outage
    while True:
        counts, _ = _job_counts(campaign, since)
        bad = {a: n for a, n in counts.items() if n not in expected(a)}
        if not bad or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not bad, f"jobs per attempt in sacct: {bad}"
    for point in campaign.glob("curves/*/b*"):
        kinds = [json.loads(p.read_text())["outcome"]["kind"] for p in point.glob("attempt-*/result.json")]
        assert sum(k in ("ok", "cuda_oom") for k in kinds) <= 1, (point, kinds)
    for receipt in campaign.glob("curves/*/b*/attempt-*/receipt.json"):
        assert (receipt.parent / "result.json").exists(), f"finished job without result: {receipt}"


def assert_boundaries_only_from_cuda_oom(campaign: Path) -> None:
    from throughput_sweep.campaign import open_campaign

    for curve in open_campaign(campaign).curves():
        if curve.state == "bounded":
            assert curve.first_oom is not None, curve.name
        if curve.first_oom is None:
            continue
        info = curve.points[curve.first_oom]
        kind = outcome_kind(info.attempt.result.outcome)
        assert kind == "cuda_oom", f"{curve.name}: boundary at batch {curve.first_oom} set by {kind}"
        assert curve.largest_fitting is None or curve.largest_fitting < curve.first_oom


def check_campaign(campaign: Path, since: datetime) -> dict[str, str]:
    """The state every fault case must end in. Returns {curve: state} for further checks.

    - no point has more than one job in sacct (jobs found by the token in their name), and
      every attempt that was submitted has exactly one;
    - every finished job (a receipt) has its result.json, and it decodes;
    - a curve's memory boundary is set only by a `cuda_oom` result;
    - no job of the campaign is still queued or running.
    """
    from throughput_schema import WorkerResult, read
    from throughput_sweep.campaign import open_campaign

    assert_exactly_one_job_per_point(campaign, since)
    for path in campaign.glob("curves/*/b*/attempt-*/result.json"):
        read(path, WorkerResult)
    assert_boundaries_only_from_cuda_oom(campaign)
    tokens = {t for ts in intents(campaign).values() for t in ts}
    queued = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout.split()
    assert not tokens & set(queued), f"jobs still in the queue: {tokens & set(queued)}"
    return {c.name: c.state for c in open_campaign(campaign).curves()}


# --- fault cases: a watcher process, its results, Slurm's daemons


def finish(proc: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def result_kind(out: Path, curve: str, batch: int, attempt: int = 1) -> str:
    return json.loads((out / f"curves/{curve}/b{batch}/attempt-{attempt}/result.json").read_text())["outcome"]["kind"]


def sacct_answers() -> bool:
    return subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True).returncode == 0


@contextmanager
def daemon_stopped(name: str):
    slurm_tool("stop-daemon", name)
    try:
        yield
    finally:
        slurm_tool("start-daemon", name)
        slurm_tool("start")
