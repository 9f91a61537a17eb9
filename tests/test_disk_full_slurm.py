"""A campaign folder whose filesystem fills during a campaign on the real Slurm (a real 8 MiB
tmpfs; Slurm 22.05 only: 24.11's jobs run in their own mount namespace, which does not see a
filesystem mounted after it started).

- A job fills it before its result: the worker and its watchdog keep their records on the
  node and exit `storage_full` (10), which sacct keeps; the watcher stops in one line when it
  cannot write its own record; after space is freed, --resume settles the point as
  storage_full (blocked, never a boundary) and --retry-failed measures it again.
- It fills between sbatch and the receipt (a site's sbatch wrapper that fills it after the
  real sbatch answered): the watcher stops in one line; --resume adopts the job by its token,
  and every point ran exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import datetime, timedelta

import pytest

from campaign_helpers import (
    assert_exactly_one_job_per_point,
    check_campaign,
    profile,
    scripted_run,
    sweep,
    watching,
    write_plan,
)
from disk_full import filling_plan, stopped_line, storage_full_point

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_job_that_fills_the_disk_is_storage_full_not_a_crash(local_slurm, small_fs, tmp_path):
    since = datetime.now() - timedelta(seconds=2)
    filler = small_fs / "filler"
    plan = filling_plan(tmp_path, filler)
    out, node = small_fs / "camp", tmp_path / "node-local"
    node.mkdir()
    env = {"TMPDIR": str(node)}
    prof = profile(tmp_path)
    run = sweep(*scripted_run(out, 512, max_batch=8, profile=prof, poll_max=1), plan=plan, env=env)
    stopped_line(run, out)
    assert not (out / "curves/20m-c512/b4").exists(), "a point was submitted after the disk filled"
    job = json.loads((out / "curves/20m-c512/b2/attempt-1/receipt.json").read_text())["job_id"]
    said = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,ExitCode"], capture_output=True, text=True
    )
    assert said.stdout.strip() == "FAILED|10:0", said.stdout + said.stderr
    assert [p.name for p in node.rglob("*.json")] == ["result.json"], "the worker's record is kept on the node"

    os.unlink(filler)
    resumed = sweep("run", "--output", out, "--resume", *watching(1), plan=plan, env=env)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr  # blocked: needs the user
    assert storage_full_point(out)["worker"]["written_by"] == "controller"
    retried = sweep("run", "--output", out, "--resume", "--retry-failed", *watching(1), plan=plan, env=env)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert check_campaign(out, since) == {"20m-c512": "bounded"}
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    from throughput_audit.audit import run_audit

    report = run_audit(out, settle_seconds=20, allow_test_worker=True).report
    assert [c.message for c in report.checks if c.status == "fail"] == []


def filling_sbatch(bin_dir, filler, count) -> None:
    """`sbatch` first on PATH: the real one; after its second job (the preflight's test runs
    aside), the filesystem is filled before the job id is printed."""
    real = shutil.which("sbatch")
    assert real is not None, "the local Slurm puts sbatch on PATH"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(
        "#!/bin/sh\n"
        f'id=$("{real}" "$@") || {{ rc=$?; printf "%s\\n" "$id"; exit "$rc"; }}\n'
        'case "$*" in *--test-only*) printf "%s\\n" "$id"; exit 0 ;; esac\n'  # the preflight's
        f'echo x >>"{count}"\n'
        f'if [ "$(wc -l <"{count}")" -eq 2 ]; then cat /dev/zero >"{filler}" 2>/dev/null; fi\n'
        'printf "%s\\n" "$id"\n'
    )
    script.chmod(0o755)


def test_a_receipt_the_disk_refused_is_settled_by_token_on_resume(local_slurm, small_fs, tmp_path, monkeypatch):
    since = datetime.now() - timedelta(seconds=2)
    filler = small_fs / "filler"
    filling_sbatch(tmp_path / "bin", filler, tmp_path / "submitted")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    # The second job outlasts the stop, so it writes its result once there is space again.
    plan = write_plan(tmp_path, {"20m-c512-b2": {"outcome": "sleep", "seconds": 8, "then": "ok"}})
    out = small_fs / "camp"
    run = sweep(*scripted_run(out, 512, max_batch=2, profile=profile(tmp_path), poll_max=1), plan=plan)
    line = stopped_line(run, out)
    attempt = out / "curves/20m-c512/b2/attempt-1"
    # The receipt, or the first job's final accounting (the poller's write may come first).
    assert f"cannot write {out}/curves/20m-c512/b" in line and "/receipt.json: " in line, line
    assert (attempt / "intent.json").exists() and not (attempt / "receipt.json").exists()

    os.unlink(filler)
    time.sleep(1)
    resumed = sweep("run", "--output", out, "--resume", *watching(1), plan=plan)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((attempt / "receipt.json").read_text())["adopted"] is True
    assert json.loads((attempt / "result.json").read_text())["outcome"]["kind"] == "ok"
    assert_exactly_one_job_per_point(out, since)
    assert check_campaign(out, since) == {"20m-c512": "capped"}
