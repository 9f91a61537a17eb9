"""A full filesystem (a real size-limited tmpfs, mounted by the test where the machine allows
it), on the local scheduler: under a finished campaign, collect, the audit and the report
refuse in one line and leave their previous outputs whole; during a campaign, the watcher
stops in one line and --resume goes on once there is space (tests/test_disk_full_slurm.py:
the same on Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from campaign_helpers import ROOT, scripted_run, sweep, watching, write_plan
from disk_full import fill, filling_plan, one_line, snapshot, stopped_line, storage_full_point

pytestmark = pytest.mark.slow

AUDIT = [sys.executable, "-m", "throughput_audit.cli", "--allow-test-worker"]
REPORT = [sys.executable, "-m", "throughput_report.cli", "--allow-test-worker"]


def test_collect_the_audit_and_the_report_refuse_on_a_full_disk_and_keep_their_outputs(small_fs, tmp_path):
    plan = write_plan(tmp_path, {})
    out, opt = small_fs / "camp", small_fs / "opt"
    assert sweep(*scripted_run(out, 512, max_batch=2, poll_max=1), plan=plan).returncode == 0
    assert sweep(*scripted_run(opt, timing_from=out, poll_max=1), plan=plan).returncode == 0
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    audited = subprocess.run([*AUDIT, "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    before = snapshot(out)
    filler = fill(small_fs)

    collect = sweep("collect", "--output", out, plan=plan)
    assert collect.returncode == 2
    line = one_line(collect.stderr)
    assert line.startswith(f"throughput-sweep: cannot write {out}/"), line
    assert "No space left on device (ENOSPC): its filesystem is full or over its quota" in line
    audit = subprocess.run([*AUDIT, "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert audit.returncode == 2
    assert one_line(audit.stderr).startswith(f"throughput-audit: cannot write {out}/audit")
    assert "No space left on device (ENOSPC): its filesystem is full" in audit.stderr
    report = subprocess.run(
        [*REPORT, "--throughput", str(out), "--optimizer", str(opt), "--output", str(small_fs / "report")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 2, report.stdout + report.stderr
    assert one_line(report.stderr).startswith(f"throughput-report: cannot write {small_fs}/"), report.stderr
    assert sorted(p.name for p in small_fs.iterdir()) == ["camp", "filler", "opt"], "the report left files behind"
    assert snapshot(out) == before, "a refused command changed the campaign's files"

    os.unlink(filler)
    assert sweep("collect", "--output", out, plan=plan).returncode == 0


def test_a_disk_that_fills_mid_campaign_stops_the_watcher_and_resume_goes_on(small_fs, tmp_path):
    """Local scheduler: the job's worker, its watchdog and the job's wrapper cannot write; each
    keeps its record on the node; the watcher stops in one line; once space is freed --resume
    settles the point as storage_full (blocked, not a boundary) and --retry-failed measures it."""
    filler = small_fs / "filler"
    plan = filling_plan(tmp_path, filler)
    out = small_fs / "camp"
    node = tmp_path / "node-local"
    node.mkdir()
    env = {"TMPDIR": str(node)}
    run = sweep(*scripted_run(out, 512, max_batch=8, poll_max=1), plan=plan, env=env)
    stopped_line(run, out)
    assert not (out / "curves/20m-c512/b4").exists(), "a point was submitted after the disk filled"
    assert not (out / "curves/20m-c512/b2/attempt-1/result.json").exists()
    kept = sorted(p.name for p in node.rglob("*.json"))
    assert "result.json" in kept and "1.end.json" not in kept, kept  # the worker's and the watchdog's copy

    os.unlink(filler)
    resumed = sweep("run", "--output", out, "--resume", *watching(1), plan=plan, env=env)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr  # blocked: needs the user
    assert storage_full_point(out)["exit_code"] == 10
    assert not list(node.rglob("*.end.json")), "the wrapper's kept end record was not published"
    retried = sweep("run", "--output", out, "--resume", "--retry-failed", *watching(1), plan=plan, env=env)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert json.loads((out / "curves/20m-c512/b2/attempt-2/result.json").read_text())["outcome"]["kind"] == "ok"
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    audited = subprocess.run([*AUDIT, "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert audited.returncode == 0, audited.stdout + audited.stderr
