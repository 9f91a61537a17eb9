"""The committed worked example (docs/examples/) stays true.

The archive `docs/examples/h200-e2e-state/e2e-h200.tar.gz` holds the H200 run's campaign
folders as they came back from the GPU machine. Unpacked anywhere, each campaign must pass
`throughput-audit`, every throughput curve must end at a confirmed `cuda_oom`, collect's
results must equal the published `docs/examples/e2e-h200/` copy, and the reading in
`docs/examples/README.md` must quote those results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs/examples"
PUBLISHED = EXAMPLES / "e2e-h200"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _curves(results: Path) -> list[dict]:
    return json.loads(results.read_text())["curves"]


@pytest.mark.parametrize("tz", ["America/Los_Angeles", "Asia/Tokyo"])
def test_the_audit_does_not_depend_on_the_auditors_timezone(worked_example, tz, tmp_path):
    # The archive was made on a UTC machine (its registry's older times carry no offset)
    # and is re-audited wherever its reader is.
    campaign = tmp_path / "throughput"
    shutil.copytree(worked_example / "throughput", campaign)
    audited = subprocess.run(
        [sys.executable, "-m", "throughput_audit.cli", "--output", str(campaign)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "TZ": tz},
    )
    assert audited.returncode == 0, audited.stdout + audited.stderr


def test_throughput_campaign_audits_clean_and_every_curve_ends_at_a_confirmed_oom(worked_example):
    campaign = worked_example / "throughput"
    audited = _cli("throughput_audit.cli", "--output", str(campaign))
    assert audited.returncode == 0, audited.stdout + audited.stderr
    report = json.loads((campaign / "audit.json").read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] > 1000

    assert _cli("throughput_sweep.cli", "collect", "--output", str(campaign)).returncode == 0
    curves = _curves(campaign / "results.json")
    assert [c["curve"] for c in curves] == ["20m-c512", "20m-c2048", "250m-c512", "250m-c2048"]
    for c in curves:
        assert c["state"] == "bounded", c
        oom = sorted((campaign / "curves" / c["curve"] / f"b{c['first_oom_batch']}").glob("attempt-*/result.json"))[-1]
        outcome = json.loads(oom.read_text())["outcome"]
        assert outcome["kind"] == "cuda_oom", (c["curve"], outcome)
        assert json.loads((oom.parent / "receipt.json").read_text())["job_id"]

    # The published copy is collect's output for this archive (only the time of collecting differs).
    assert curves == _curves(PUBLISHED / "throughput/results.json")


def test_the_reading_quotes_the_published_results():
    reading = (EXAMPLES / "README.md").read_text()
    points = json.loads((PUBLISHED / "throughput/results.json").read_text())["points"]
    stated = re.search(r"the CV is at most ([\d.]+)% at every point", reading)
    assert stated and max(p["cv"] for p in points if p["cv"] is not None) * 100 <= float(stated.group(1))
    for c in _curves(PUBLISHED / "throughput/results.json"):
        row = re.search(rf"^\| {re.escape(c['curve'])} \|(.*)$", reading, re.MULTILINE)
        assert row, f"no row for {c['curve']} in docs/examples/README.md"
        cells = [x.strip() for x in row.group(1).split("|")]
        assert cells[0] == str(c["fastest_stable_batch"])
        assert cells[1] == f"{c['fastest_tokens_per_second']:,.0f}"
        assert cells[3].startswith(f"{c['largest_fitting_batch']} ")
        assert cells[4].startswith(f"{c['first_oom_batch']},")


def test_optimizer_follow_up_audits_clean_or_lacks_only_its_unfinished_points(worked_example):
    campaign = worked_example / "optimizer"
    audited = _cli("throughput_audit.cli", "--output", str(campaign))
    if (worked_example / "STATE.txt").read_text().strip() == "complete":
        assert audited.returncode == 0, audited.stdout + audited.stderr
        return
    # Still running on the GPU machine (docs/examples/h200-e2e-state/): every point measured
    # so far passes, and what fails is only the grid's unfinished part.
    assert audited.returncode == 1, audited.stdout + audited.stderr
    report = json.loads((campaign / "audit.json").read_text())
    failed = {c["name"] for c in report["checks"] if c["status"] == "fail"}
    assert failed == {"attempt.result", "optimizer.grid"}, failed
    assert report["summary"]["passed"] > 1000
