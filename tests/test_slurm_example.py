"""The committed Slurm worked example (docs/examples/slurm-h200): its reading agrees with
its files, what sacct accounted is what the profile asked for, at most one job ran per
GPU, and every figure still re-derives from the packed raw files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tarfile
from datetime import datetime

from campaign_helpers import ROOT

EXAMPLE = ROOT / "docs/examples/slurm-h200"
READING = (ROOT / "docs/examples/slurm-h200.md").read_text()
STATE = ROOT / "docs/examples/slurm-h200-state/e2e-h200-slurm.tar.gz"


def accounting(campaign: str) -> list[dict]:
    lines = [
        line for line in (EXAMPLE / campaign / "accounting.txt").read_text().splitlines() if not line.startswith("#")
    ]
    return list(csv.DictReader(lines, delimiter="|"))


def test_both_audits_passed_with_their_sacct_checks_and_the_reading_quotes_them():
    counts = []
    for campaign in ("throughput", "optimizer"):
        audit = json.loads((EXAMPLE / campaign / "audit.json").read_text())
        assert audit["summary"]["failed"] == 0 and audit["scheduler_accounting"] == "checked"
        counts.append(audit["summary"]["passed"])
    assert f"({counts[0]} and {counts[1]} checks,\n> 0 failed" in READING


def test_every_job_got_the_profiles_resources_and_at_most_one_job_ran_per_gpu():
    gpus = len((EXAMPLE / "gpu.txt").read_text().splitlines())
    for campaign in ("throughput", "optimizer"):
        rows = accounting(campaign)
        assert rows and {r["AllocTRES"] for r in rows} == {"billing=8,cpu=8,gres/gpu=1,mem=64G,node=1"}
        assert {r["Timelimit"] for r in rows} == {"00:14:00"}
        spans = [(datetime.fromisoformat(r["Start"]), datetime.fromisoformat(r["End"])) for r in rows]
        peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        assert peak <= gpus
    follow_up = list(csv.DictReader((EXAMPLE / "optimizer/results.csv").open()))
    assert len({r["gpu_uuid"] for r in follow_up}) == gpus == 2


def test_the_reading_states_the_published_figures():
    [curve] = json.loads((EXAMPLE / "throughput/results.json").read_text())["curves"]
    assert (curve["state"], curve["largest_fitting_batch"], curve["first_oom_batch"]) == ("bounded", 256, 512)
    assert f"batch 256 at {curve['fastest_tokens_per_second']:,.0f} tokens/s" in READING
    points = {p["batch_size"]: p for p in json.loads((EXAMPLE / "optimizer/optimizer.json").read_text())["points"]}
    assert f"{points[256]['baseline_tokens_per_second']:,.0f} tokens/s" in READING
    assert f"{points[1]['optimizer_percent']:.2f}% of the update at batch 1" in READING
    assert f"{points[256]['optimizer_percent']:.2f}% at batch 256" in READING


def test_every_figure_re_derives_from_the_packed_raw_files(tmp_path):
    with tarfile.open(STATE) as tar:
        tar.extractall(tmp_path, filter="data")
    [root] = list(tmp_path.iterdir())
    for campaign in ("throughput", "optimizer"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts/throughput_audit.py"), "--output", str(root / campaign), "--no-slurm"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert " 0 failed" in proc.stdout
