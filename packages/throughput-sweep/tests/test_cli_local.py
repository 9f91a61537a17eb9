"""The command line on the local scheduler with the scripted worker: no Slurm, no GPU."""

from __future__ import annotations

import fcntl
import functools
import json
import sys
import time
from pathlib import Path

import pytest

from campaign_helpers import BLOCKED, scripted_run, sweep, watching

pytestmark = pytest.mark.slow  # whole campaigns on the local scheduler

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "tests"


# Each command here must exit 0 unless the test names another status (rc=...).
run = functools.partial(sweep, rc=0)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def plan(tmp_path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            {
                "default": "ok",
                "ok_seconds": 0.05,
                "points": {"20m-c512-b4": "cuda_oom", "20m-c1024-b2@1": "compile_error"},
            }
        )
    )
    return path


def sweep(out, plan, *extra, rc=0):
    return run(*scripted_run(out, 512, 1024, poll_max=1), *extra, plan=plan, rc=rc)


def test_local_campaign_end_to_end_status_collect_and_retry(tmp_path, plan):
    out = tmp_path / "camp"
    first = sweep(out, plan, rc=BLOCKED)
    assert "retry with: " in first.stderr and "--resume --retry-failed" in first.stderr
    status = run("status", "--output", out, rc=BLOCKED).stdout
    assert "20m-c512           bounded" in status and "blocked: batch 2 attempt 1" in status
    assert "compile_error" in status and "ended with blocked curves" in status
    # Frozen copy with hashes; the scripted worker itself is frozen too.
    manifest = json.loads((out / "manifest.json").read_text())
    paths = {f["path"] for f in manifest["frozen_files"]}
    assert {
        "uv.lock",
        "extra/scripted_worker.py",
        "recipes/20m.json",
        "configs/20m.yaml",
        "scripts/throughput_sweep.py",
        "packages/throughput-sweep/src/throughput_sweep/cli.py",
    } <= paths
    assert manifest["contexts"] == [512, 1024] and manifest["worker"] == "scripted_worker"
    # Permissions: nothing writable by group or others.
    for p in out.rglob("*"):
        assert not (p.stat().st_mode & 0o022), p
    # Resume with other contexts is refused and changes nothing.
    before = snapshot(out)
    r = run("run", "--output", out, "--resume", "--contexts", "512", "2048", rc=2)
    assert "new campaign" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(out) == before
    # Collect: INCOMPLETE at the top, the boundary and the failure in the README.
    run("collect", "--output", out)
    readme = (out / "README.md").read_text()
    assert readme.startswith("**INCOMPLETE**")
    assert "| 20m-c512 | bounded | 1 2 | 2 | 4 | 2 |" in readme
    assert "compile_error" in readme and "scripted compiler error" in readme
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is False
    c1024 = next(c for c in results["curves"] if c["curve"] == "20m-c1024")
    assert c1024["state"] == "blocked" and c1024["first_oom_batch"] is None
    rows = (out / "results.csv").read_text().splitlines()
    assert (
        rows[0].startswith("curve,model,context_length,batch_size,attempt,status,outcome,job_id") and len(rows) == 1 + 5
    )
    # Each measured point names the GPU it ran on (hostnames of lent machines repeat).
    measured = [p for p in results["points"] if p["status"] == "ok"]
    assert measured and {p["gpu_uuid"] for p in measured} == {"GPU-00000000-0000-0000-0000-5c41f7ed0001"}
    for png in ("throughput.png", "memory.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # --retry-failed: a fresh attempt directory, the failed one kept; the curve then goes on.
    retried = sweep(out, plan, "--resume", "--retry-failed", rc=None)
    assert retried.returncode in (0, BLOCKED), retried.stderr
    assert (out / "curves/20m-c1024/b2/attempt-1/result.json").exists()
    assert json.loads((out / "curves/20m-c1024/b2/attempt-2/result.json").read_text())["outcome"]["kind"] == "ok"
    status = run("status", "--output", out, rc=None).stdout
    assert "20m-c1024          pending" in status or "20m-c1024          running" in status or "20m-c1024" in status


def test_dry_run_writes_nothing_and_prints_the_plan(tmp_path, plan):
    out = tmp_path / "dry"
    r = sweep(out, plan, "--dry-run")
    assert not out.exists()
    assert "20m-c512" in r.stdout and "first batch script" in r.stdout and "throughput_sweep.node.watchdog" in r.stdout
    assert "#!/bin/bash" in r.stdout and "--gpus" not in r.stdout


def test_second_watcher_refuses(tmp_path, plan):
    out = tmp_path / "camp"
    sweep(out, plan, rc=BLOCKED)
    with open(out / "watcher.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = sweep(out, plan, "--resume", rc=2)
    assert "another watcher" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--output", "{o}", "--models", "nope"], "config file not found"),
        (["run", "--output", "{o}", "--contexts", "500", "--models", "20m"], "not supported"),
        (["run", "--output", "{o}", "--contexts", "0"], "must be positive"),
        (["run", "--output", "{o}", "--max-batch", "6", "--models", "20m"], "power of two"),
        (["run", "--output", "{o}", "--max-batch", "-2"], "must be positive"),
        (["run", "--output", "{o}", "--resume"], "no campaign to resume"),
        (["run", "--output", "{o}", "--retry-failed"], "--resume"),
        (["run", "--output", "{o}", "--profile", "no-such-profile"], "no such profile"),
        (["run", "--output", "{o}", "--models", "a b"], "preset name"),
        (["run", "--output", "{o}", "--optimizer-timing-from", "{o}/none"], "no such campaign"),
        (["run", "--output", "{o}", "--parallel-optimizer-points"], "--optimizer-timing-from"),
        (["status", "--output", "{o}/missing"], "no such campaign"),
        (["collect", "--output", "{o}/missing"], "no such campaign"),
        (["run", "--output", "{o}", "--window-seconds", "nan"], "positive number"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, words):
    out = tmp_path / "c"
    r = run(*[a.format(o=out) for a in args], rc=2)
    assert words in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_corrupted_manifest_is_one_line(tmp_path, plan):
    out = tmp_path / "camp"
    sweep(out, plan, rc=BLOCKED)
    (out / "manifest.json").write_text('{"kind": "throughput", "na')
    before = snapshot(out)
    for cmd in (["status", "--output", out], ["collect", "--output", out], ["run", "--output", out, "--resume"]):
        r = run(*cmd, rc=2)
        assert "manifest.json" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(out) == before


def test_optimizer_follow_up_sequential_and_parallel(tmp_path, plan):
    parent = tmp_path / "parent"
    plan.write_text(
        json.dumps(
            {"default": "ok", "ok_seconds": 0.05, "points": {"20m-c512-b4": "cuda_oom", "20m-c1024-b8": "cuda_oom"}}
        )
    )
    sweep(parent, plan)
    before = snapshot(parent)
    opt = tmp_path / "opt"
    run(*scripted_run(opt, timing_from=parent, poll_max=1), plan=plan)
    m = json.loads((opt / "manifest.json").read_text())
    assert m["kind"] == "optimizer-timing" and m["inherited_batches"] == {"20m-c512": [1, 2], "20m-c1024": [1, 2, 4]}
    assert snapshot(parent) == before
    run("collect", "--output", opt)
    assert not (opt / "README.md").read_text().startswith("**INCOMPLETE**")
    rows = json.loads((opt / "optimizer.json").read_text())["points"]
    assert len(rows) == 5
    for r in rows:
        assert r["optimizer_percent"] == pytest.approx(100 * r["optimizer_ms"] / r["baseline_update_ms"])
    for png in ("optimizer-time.png", "optimizer-share.png"):
        assert (opt / png).exists()
    assert (opt / "curves/20m-c512/b2/attempt-1/baseline.json").exists()
    # Parallel mode with an injected failure: only its curve pauses.
    plan.write_text(
        json.dumps({"default": "ok", "ok_seconds": 0.05, "points": {"20m-c1024-b2:optimizer": "nonfinite"}})
    )
    par = tmp_path / "par"
    run(*scripted_run(par, timing_from=parent, poll_max=1), "--parallel-optimizer-points", plan=plan, rc=BLOCKED)
    status = run("status", "--output", par, rc=BLOCKED).stdout
    assert "20m-c512           complete" in status and "20m-c1024          blocked" in status


def test_printed_commands_name_the_way_we_were_started(monkeypatch):
    """Resume and collect hints repeat the invocation: `python -m throughput_sweep.cli`
    on a machine without the console script (seen on the GPU image, where argv[0] is
    the module's file), the console script otherwise."""
    import types

    from throughput_sweep.cli import PROG, driver_name

    as_module = types.ModuleType("__main__")
    as_module.__spec__ = types.SimpleNamespace(name="throughput_sweep.cli")
    monkeypatch.setitem(sys.modules, "__main__", as_module)
    monkeypatch.setattr(sys, "argv", ["/x/packages/throughput-sweep/src/throughput_sweep/cli.py", "run"])
    assert driver_name().endswith(" -m throughput_sweep.cli")

    as_script = types.ModuleType("__main__")
    as_script.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", as_script)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/throughput-sweep", "run"])
    assert driver_name() == PROG


def test_crash_between_the_request_and_the_intent_submits_nothing_twice(tmp_path, plan):
    """SIGKILL after request.json and job.sh, before intent.json: that attempt never ran, and
    the resumed watcher measures the point in the next attempt."""
    out = tmp_path / "camp"
    run(*scripted_run(out, 512, max_batch=2, poll_max=1), plan=plan, rc=-9, crash="after-request")
    first = out / "curves/20m-c512/b1/attempt-1"
    assert sorted(p.name for p in first.iterdir()) == ["job.sh", "request.json"]
    run("run", "--output", out, "--resume", *watching(1), plan=plan)
    assert sorted(p.name for p in first.iterdir()) == ["job.sh", "request.json"]
    receipts = sorted(out.glob("curves/*/b*/attempt-*/receipt.json"))
    assert [p.parent.relative_to(out).as_posix() for p in receipts] == [
        "curves/20m-c512/b1/attempt-2",
        "curves/20m-c512/b2/attempt-1",
    ]


def test_a_job_that_finished_before_its_receipt_was_written_is_adopted_on_resume(tmp_path, plan):
    """SIGKILL right after the submission, before receipt.json; the job then runs to its result
    while no watcher runs. The result gives the point its status, and the resumed watcher still
    adopts the job by its token, so every job that ran has its receipt."""
    out = tmp_path / "camp"
    run(*scripted_run(out, 512, max_batch=2, poll_max=1), plan=plan, rc=-9, crash="after-submit")
    attempt = out / "curves/20m-c512/b1/attempt-1"
    assert not (attempt / "receipt.json").exists()
    deadline = time.monotonic() + 60
    while not (attempt / "result.json").exists():
        assert time.monotonic() < deadline, "the job's result never came"
        time.sleep(0.2)
    run("run", "--output", out, "--resume", *watching(1), plan=plan)
    receipt = json.loads((attempt / "receipt.json").read_text())
    intent = json.loads((attempt / "intent.json").read_text())
    assert receipt["adopted"] is True and receipt["token"] == intent["token"]
    assert not (out / "curves/20m-c512/b1/attempt-2").exists()  # measured once
    assert len(list(out.glob("curves/*/b*/attempt-*/receipt.json"))) == 2
