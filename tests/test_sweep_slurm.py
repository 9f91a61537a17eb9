"""The controller against the real local Slurm (tools/local-slurm.sh) with the scripted worker."""

from __future__ import annotations

import json
import signal
from datetime import datetime, timedelta

import pytest

from campaign_helpers import (
    BLOCKED,
    check_campaign,
    intents,
    job_state,
    profile,
    receipts,
    sacct_jobs,
    start_sweep,
    sweep,
    wait_for,
    write_plan,
)
from throughput_sweep.exit_statuses import EXIT_INTERRUPTED

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.slurm2411]


def test_two_models_two_contexts_through_real_sbatch(local_slurm, tmp_path):
    since = datetime.now() - timedelta(seconds=5)
    plan = write_plan(
        tmp_path,
        {
            "20m-c512-b4": "cuda_oom",
            "20m-c1024-b2@1": "compile_error",
            "90m-c512-b2@1": {"outcome": "sleep", "seconds": 3600},
            "90m-c1024-b2@1": {"outcome": "allocate", "mb": 1500},
        },
    )
    out = tmp_path / "camp"
    prof = profile(tmp_path, mem="400M")
    r = sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "90m",
        "--contexts",
        "512",
        "1024",
        "--profile",
        prof,
        "--worker",
        "scripted_worker",
        "--max-batch",
        "4",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "2",
        "--no-progress",
        plan=plan,
    )
    assert r.returncode == BLOCKED, r.stderr
    status = sweep("status", "--output", out, plan=plan).stdout
    assert "20m-c512           bounded" in status
    assert "20m-c1024          blocked" in status and "compile_error" in status
    assert "90m-c512           blocked" in status and "timeout" in status
    assert "90m-c1024          blocked" in status and "host_oom" in status
    results = {p.parents[2].name: json.loads(p.read_text()) for p in out.glob("curves/*/b2/attempt-1/result.json")}
    assert results["90m-c512"]["outcome"]["kind"] == "timeout"
    assert results["90m-c1024"]["outcome"]["kind"] == "host_oom"
    receipts = {p.parents[2].name: json.loads(p.read_text()) for p in out.glob("curves/*/b2/attempt-1/receipt.json")}
    # The watchdog stopped the hung worker at its deadline and exited with the timeout code.
    assert receipts["90m-c512"]["accounting"]["state"] == "failed"
    assert receipts["90m-c512"]["accounting"]["exit_code"] == 6
    assert receipts["90m-c1024"]["accounting"]["state"] == "out_of_memory"
    assert all(r["accounting_final"] for r in receipts.values())
    sweep("collect", "--output", out, plan=plan)
    summary = {c["curve"]: c for c in json.loads((out / "results.json").read_text())["curves"]}
    assert summary["20m-c512"]["first_oom_batch"] == 4 and summary["20m-c512"]["largest_fitting_batch"] == 2
    for name in ("20m-c1024", "90m-c512", "90m-c1024"):
        assert summary[name]["first_oom_batch"] is None and summary[name]["state"] == "blocked"
    assert (out / "README.md").read_text().startswith("**INCOMPLETE**")

    # --resume --retry-failed: fresh attempt directories; the failed ones are kept.
    r = sweep(
        "run", "--output", out, "--resume", "--retry-failed", "--poll-max-seconds", "2", "--no-progress", plan=plan
    )
    assert r.returncode == 0, r.stderr
    for name in ("20m-c1024", "90m-c512", "90m-c1024"):
        assert (out / f"curves/{name}/b2/attempt-1/result.json").exists()
        assert json.loads((out / f"curves/{name}/b2/attempt-2/result.json").read_text())["outcome"]["kind"] == "ok"
    status = sweep("status", "--output", out, plan=plan).stdout
    assert status.count("capped") >= 3 and "no OOM up to the cap" in status
    assert check_campaign(out, since)["20m-c512"] == "bounded"


@pytest.mark.slurm_exclusive
def test_at_most_twelve_jobs_at_once(local_slurm, tmp_path):
    # Twenty points are ready at once and the node admits sixteen such jobs, so only the
    # watcher's limit keeps the campaign at twelve; jobs long enough that all twelve overlap.
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {}, ok_seconds=15)
    out = tmp_path / "twenty"
    r = sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "50m",
        "90m",
        "250m",
        "500m",
        "--contexts",
        "512",
        "1024",
        "2048",
        "4096",
        "--profile",
        profile(tmp_path),
        "--worker",
        "scripted_worker",
        "--max-batch",
        "1",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "2",
        "--no-progress",
        plan=plan,
    )
    assert r.returncode == 0, r.stderr
    tokens = {t for ts in intents(out).values() for t in ts}
    rows = [row for row in sacct_jobs(since) if row["name"] in tokens]
    assert len(rows) == 20
    spans = [(datetime.fromisoformat(row["start"]), datetime.fromisoformat(row["end"])) for row in rows]
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert peak == 12, peak


def test_ctrl_c_leaves_the_jobs_running_and_resume_finishes_every_point_once(local_slurm, tmp_path):
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2": "cuda_oom"}, ok_seconds=20)
    out = tmp_path / "camp"
    log = tmp_path / "run.log"
    watcher = start_sweep(
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "1024",
        "--profile",
        profile(tmp_path),
        "--worker",
        "scripted_worker",
        "--max-batch",
        "4",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "2",
        "--no-progress",
        plan=plan,
        log=log,
    )
    try:
        jobs = wait_for(
            lambda: [r["job_id"] for r in receipts(out)] if len(receipts(out)) == 2 else None,
            timeout=120,
            what="both curves' first jobs",
        )
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == EXIT_INTERRUPTED, log.read_text()
    finally:
        watcher.kill()
    text = log.read_text()
    assert "Interrupted. 2 submitted job(s) keep running. Resume with:" in text, text
    assert text.rstrip().endswith(f"run --output {out} --resume"), text
    assert "Traceback" not in text, text
    assert {job_state(j) for j in jobs} <= {"RUNNING", "PENDING"}, [job_state(j) for j in jobs]
    assert [r["job_id"] for r in receipts(out)] == jobs  # nothing more was submitted after Ctrl-C

    r = sweep("run", "--output", out, "--resume", "--poll-max-seconds", "2", "--no-progress", plan=plan)
    assert r.returncode == 0, r.stderr
    assert check_campaign(out, since) == {"20m-c512": "bounded", "20m-c1024": "capped"}
    assert all(len(tokens) == 1 for tokens in intents(out).values()), intents(out)


@pytest.mark.parametrize(
    "step", ["before-intent@2", "after-request@2", "after-intent", "after-submit@2", "after-receipt@3"]
)
def test_sigkill_at_a_step_then_resume_submits_each_point_once(local_slurm, tmp_path, step):
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom", "20m-c1024-b2": "crash"})
    out = tmp_path / "camp"
    args = [
        "run",
        "--output",
        out,
        "--models",
        "20m",
        "--contexts",
        "512",
        "1024",
        "--profile",
        profile(tmp_path),
        "--worker",
        "scripted_worker",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "2",
        "--no-progress",
    ]
    r = sweep(*args, plan=plan, crash=step)
    assert r.returncode == -9, (r.returncode, r.stderr)
    r = sweep("run", "--output", out, "--resume", "--poll-max-seconds", "2", "--no-progress", plan=plan)
    assert r.returncode == BLOCKED, r.stderr
    status = sweep("status", "--output", out, plan=plan).stdout
    assert "20m-c512           bounded" in status and "20m-c1024          blocked" in status
    assert check_campaign(out, since) == {"20m-c512": "bounded", "20m-c1024": "blocked"}
    if step == "after-intent":
        settled = json.loads((out / "curves/20m-c512/b1/attempt-1/settlement.json").read_text())
        assert settled["state"] == "never-submitted"
        assert (out / "curves/20m-c512/b1/attempt-2/result.json").exists()
    if step.startswith("after-submit"):
        adopted = [json.loads(p.read_text())["adopted"] for p in out.glob("curves/*/b*/attempt-*/receipt.json")]
        assert adopted.count(True) == 1
