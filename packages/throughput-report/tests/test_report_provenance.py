"""What the report's figures rest on (issue 17, parts 2-4): a test worker's campaign is
refused unless allowed, then every page and figure carries the banner; points measured
on different hardware are flagged on page 1."""

from __future__ import annotations

import csv
import hashlib
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


def _pair_with(tmp_path: Path, field: str, value: str, recipe_field: tuple[str, str]) -> tuple[Path, Path]:
    """A pair whose protocol sets `field` (the recipe's `recipe_field`) to `value` in every record."""
    pair = campaigns.write_pair(tmp_path, value, ["20m"], [512])
    section, name = recipe_field
    for campaign in pair:
        edit(campaign / "manifest.json", lambda m: m["protocol"].update({field: value}))
        for path in [*campaign.glob("curves/*/b*/attempt-*/result.json"), *baselines(campaign)]:
            edit(path, lambda r: r["recipe"][section].update({name: value}))
            edit(path, lambda r: r["protocol"].update({field: value}))
    parent = hashlib.sha256((pair[0] / "manifest.json").read_bytes()).hexdigest()
    edit(pair[1] / "manifest.json", lambda m: m["parent"].update(manifest_sha256=parent))
    return pair


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


def test_an_fp8_pair_is_reported_with_its_precision_on_page_one_and_on_each_projection(tmp_path):
    pair = _pair_with(tmp_path, "precision", "fp8-tensorwise", ("training", "precision"))
    out = tmp_path / "report"
    assert main(argv(pair, out)) == 0
    first = " ".join(PdfReader(out / "report.pdf").pages[0].extract_text().split())
    assert "Precision differs from the guide: fp8-tensorwise (guide: bf16); MFU is BF16-equivalent" in first
    assert "20m fp8-tensorwise" in first  # the key table's model cell
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert rows and {row["precision"] for row in rows} == {"fp8-tensorwise"}


def test_a_muon_pair_is_reported_with_its_optimizer_on_page_one_and_on_each_projection(tmp_path):
    pair = _pair_with(tmp_path, "optimizer", "muon", ("optimizer", "name"))
    out = tmp_path / "report"
    assert main(argv(pair, out)) == 0
    first = " ".join(PdfReader(out / "report.pdf").pages[0].extract_text().split())
    assert "Optimizer differs from the guide: muon" in first
    assert "20m muon" in first  # the key table's model cell
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert rows and {(row["optimizer"], row["precision"]) for row in rows} == {("muon", "bf16")}
