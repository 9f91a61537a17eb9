"""What differs between Slurm 22.05 and 24.11 where the tool meets it, run on either
(LOCAL_SLURM_VERSION; see "Slurm versions" in docs/reliability.md).

- 24.11 creates the missing folders of a job's --output; 22.05 fails the job before its
  script starts (FAILED 0:53). Either way the campaign tells the truth.
- A job whose output folder cannot be made fails before its script on both, with another
  reason (22.05 JobLaunchFailure, 24.11 RaisedSignal:53): the result says it never started
  and names the path whatever the reason.
- A job cancelled while it pends gets a `cancelled` result that says it never started.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from campaign_helpers import BLOCKED, profile, receipts, start_sweep, sweep, wait_for, write_plan

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]

RUN = [
    "--models",
    "20m",
    "--contexts",
    "512",
    "--max-batch",
    "1",
    "--worker",
    "scripted_worker",
    "--window-seconds",
    "1",
    "--poll-max-seconds",
    "1",
    "--no-progress",
]


def outcome(out: Path) -> dict:
    return json.loads((out / "curves/20m-c512/b1/attempt-1/result.json").read_text())["outcome"]


def test_a_missing_output_folder_is_made_by_24_11_and_fails_the_job_on_22_05(local_slurm, tmp_path):
    missing = tmp_path / "no-such-folder" / "logs"
    prof = profile(tmp_path, extra_submit_args=[f"--output={missing}/slurm-%j.out"])
    out = tmp_path / "camp"
    r = sweep("run", "--output", out, "--profile", prof, *RUN, plan=write_plan(tmp_path, {}, ok_seconds=0.1))
    if local_slurm.version == "22.05":
        assert r.returncode == BLOCKED, r.stderr
        assert outcome(out)["kind"] == "crashed" and f"{missing}/slurm-" in outcome(out)["message"]
        assert not missing.exists()
    else:
        assert r.returncode == 0, r.stderr
        assert outcome(out)["kind"] == "ok"
        assert [p.name for p in missing.iterdir()] == [f"slurm-{receipts(out)[0]['job_id']}.out"]


def test_an_output_folder_that_cannot_be_made_fails_the_job_before_its_script_on_both(local_slurm, tmp_path):
    blocked = tmp_path / "a-file" / "logs"  # a regular file where a folder would have to be
    blocked.parent.write_text("")
    prof = profile(tmp_path, extra_submit_args=[f"--output={blocked}/slurm-%j.out"])
    out = tmp_path / "camp"
    r = sweep("run", "--output", out, "--profile", prof, *RUN, plan=write_plan(tmp_path, {}, ok_seconds=0.1))
    assert r.returncode == BLOCKED, r.stderr
    got = outcome(out)
    assert got["kind"] == "crashed", got
    assert got["message"].startswith("job ended FAILED before its batch script started"), got["message"]
    assert f"its output file was to be {blocked}/slurm-" in got["message"], got["message"]
    accounting = receipts(out)[0]["accounting"]
    assert (accounting["exit_code"], accounting["signal"]) == (0, 53)


def test_a_job_cancelled_while_it_pends_is_cancelled_and_never_started(local_slurm, tmp_path):
    prof = profile(tmp_path, extra_submit_args=["--begin=now+3600"])  # pends (BeginTime) until cancelled
    out = tmp_path / "camp"
    watcher = start_sweep(
        "run", "--output", out, "--profile", prof, *RUN, plan=write_plan(tmp_path, {}), log=tmp_path / "run.log"
    )
    try:
        job_id = wait_for(lambda: receipts(out) and receipts(out)[0]["job_id"], 60, "the job's receipt")
        subprocess.run(["scancel", job_id], check=True)
        assert watcher.wait(timeout=120) == BLOCKED, (tmp_path / "run.log").read_text()
    finally:
        watcher.kill()
    got = outcome(out)
    assert got["kind"] == "cancelled", got
    assert got["message"].startswith("job ended CANCELLED before its batch script started"), got["message"]
    assert "reason None" not in got["message"], got["message"]
