"""What the report's figures rest on (issue 17, parts 2-4): a test worker's campaign is
refused unless allowed, then every page and figure carries the banner; points measured
on different hardware are flagged on page 1."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from pypdf import PdfReader

from campaign_builder import gpu as campaigns
from throughput_report.cli import main

pytestmark = pytest.mark.slow  # whole reports of campaigns

BANNER = "TEST WORKER scripted_worker"


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def argv(pair, out: Path, *extra: str) -> list[str]:
    return ["--throughput", str(pair[0]), "--optimizer", str(pair[1]), "--output", str(out), *extra]


def baselines(optimizer: Path) -> list[Path]:
    return sorted(optimizer.glob("curves/*/b*/attempt-*/baseline.json"))


def test_a_result_from_a_test_worker_is_refused_unless_allowed(tmp_path, capsys):
    pair = campaigns.write_pair(tmp_path, "tw", ["20m"], [512])
    edit(baselines(pair[1])[0], lambda r: r.update(worker={"module": "scripted_worker", "version": "test"}))
    assert main(argv(pair, tmp_path / "refused")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "test worker 'scripted_worker'" in err and "--allow-test-worker" in err
    assert not (tmp_path / "refused").exists()

    out = tmp_path / "allowed"
    assert main(argv(pair, out, "--allow-test-worker")) == 0
    assert capsys.readouterr().out.startswith(BANNER)
    assert all(BANNER in page.extract_text() for page in PdfReader(out / "report.pdf").pages)
    assert all(BANNER in svg.read_text() for svg in out.glob("*.svg"))
    assert json.loads((out / "points.json").read_text())["inputs"]["test_worker"].startswith(BANNER)
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert rows and all(row["test_worker"].startswith(BANNER) for row in rows)


def test_points_on_different_gpus_are_flagged_on_page_one(tmp_path):
    pair = campaigns.write_pair(tmp_path, "mixed", ["20m"], [512])
    edit(baselines(pair[1])[0], lambda r: r["hardware"].update(gpu_name="NVIDIA H100 80GB HBM3"))
    out = tmp_path / "report"
    assert main(argv(pair, out)) == 0
    first = " ".join(PdfReader(out / "report.pdf").pages[0].extract_text().split())
    assert "Points ran on different hardware or software: GPU models" in first
    assert "NVIDIA H100 80GB HBM3" in first and "TEST WORKER" not in first
