"""close-curve on the local scheduler: a blocked curve ended by a recorded decision, shown
as such by status, collect, the audit (which checks it names the curve's last failure)
and the report, and never as a memory boundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from campaign_helpers import BLOCKED, ROOT, sweep, write_plan

pytestmark = pytest.mark.slow  # whole campaigns on the local scheduler


def tool(script: str, *args) -> subprocess.CompletedProcess:
    """The audit or the report, which pass the scripted worker's campaigns only when told."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *map(str, args), "--allow-test-worker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


RUN = (
    "--models",
    "20m",
    "--contexts",
    "512",
    "1024",
    "--worker",
    "scripted_worker",
    "--window-seconds",
    "1",
    "--poll-max-seconds",
    "1",
    "--no-progress",
)


def close(out, *args):
    return sweep("close-curve", "--output", out, *args)


def test_close_curve_records_the_decision_and_ends_the_curve_without_a_boundary(tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom", "20m-c1024-b2": "compile_error"}, ok_seconds=0.05)
    out = tmp_path / "camp"
    assert sweep("run", "--output", out, *RUN, plan=plan).returncode == BLOCKED
    record = out / "curves/20m-c1024/closure.json"

    for args, words in (
        (["20m-c512", "--reason", "x"], "20m-c512 is bounded, not blocked"),
        (["20m-c4096", "--reason", "x"], "20m-c4096: no such curve"),
        (["20m-c1024", "--reason", "  "], "--reason: say in a line why"),
    ):
        r = close(out, *args)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not record.exists()

    r = close(out, "20m-c1024", "--reason", "the compiler fails at batch 2 on every retry")
    assert r.returncode == 0, r.stderr
    assert "closed by hand at batch 2 (attempt 1, compile_error)" in r.stdout
    closure = json.loads(record.read_text())
    assert (closure["curve"], closure["batch_size"], closure["attempt"], closure["outcome"]) == (
        "20m-c1024",
        2,
        1,
        "compile_error",
    )
    assert closure["reason"] == "the compiler fails at batch 2 on every retry" and closure["user"] and closure["host"]
    again = close(out, "20m-c1024", "--reason", "again")
    assert again.returncode == 2 and "already closed by hand" in again.stderr

    status = sweep("status", "--output", out)
    assert status.returncode == 0 and status.stdout.splitlines()[0].endswith(": complete"), status.stdout
    assert "closed by hand at batch 2: the compiler fails at batch 2 on every retry" in status.stdout
    assert "not a memory boundary" in status.stdout

    # --retry-failed leaves a closed curve closed: no new attempt.
    assert sweep("run", "--output", out, "--resume", "--retry-failed", *RUN[-3:], plan=plan).returncode == 0
    assert not (out / "curves/20m-c1024/b2/attempt-2").exists()

    assert sweep("collect", "--output", out).returncode == 0
    readme = (out / "README.md").read_text()
    assert not readme.startswith("**INCOMPLETE**") and "Curves closed by hand" in readme
    curves = {c["curve"]: c for c in json.loads((out / "results.json").read_text())["curves"]}
    closed = curves["20m-c1024"]
    assert closed["state"] == "closed" and closed["first_oom_batch"] is None and closed["fitting_batches"] == [1]
    assert closed["closure"]["attempt"] == 1

    # The audit checks the closure against the raw files, and the report shows it.
    audit = tool("throughput_audit.py", "--output", out)
    assert audit.returncode == 0, audit.stdout[-3000:]
    closure_checks = [c for c in json.loads((out / "audit.json").read_text())["checks"] if c["name"] == "curve.closure"]
    assert [c["status"] for c in closure_checks] == ["pass"]
    opt = tmp_path / "opt"
    assert (
        sweep(
            "run", "--optimizer-timing-from", out, "--output", opt, "--worker", "scripted_worker", *RUN[-3:], plan=plan
        ).returncode
        == 0
    )
    assert json.loads((opt / "manifest.json").read_text())["inherited_batches"] == {
        "20m-c512": [1, 2],
        "20m-c1024": [1],
    }
    assert sweep("collect", "--output", opt).returncode == 0
    assert tool("throughput_audit.py", "--output", opt).returncode == 0
    report = tool("throughput_report.py", "--throughput", out, "--optimizer", opt, "--output", tmp_path / "report")
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    joined = json.loads((tmp_path / "report/points.json").read_text())
    curve = next(c for c in joined["curves"] if c["curve"] == "20m-c1024")
    assert curve["closed_by_hand"].startswith("at batch 2:") and curve["first_oom_batch"] is None


def test_the_audit_fails_a_closure_that_does_not_name_the_last_failure(tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b2": "compile_error"}, ok_seconds=0.05)
    out = tmp_path / "camp"
    assert sweep("run", "--output", out, *RUN[:4], *RUN[5:], plan=plan).returncode == BLOCKED
    assert close(out, "20m-c512", "--reason", "compiler").returncode == 0
    record = out / "curves/20m-c512/closure.json"
    edited = json.loads(record.read_text()) | {"batch_size": 1}
    record.write_text(json.dumps(edited))
    assert sweep("status", "--output", out).returncode == BLOCKED  # a closure on another attempt does not count
    audit = tool("throughput_audit.py", "--output", out)
    assert audit.returncode != 0
    failed = [c for c in json.loads((out / "audit.json").read_text())["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["curve.closure"], failed
    assert "last failed attempt is batch 2 attempt 1 (compile_error)" in failed[0]["message"]
