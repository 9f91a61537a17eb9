"""A whole report: six pages with their text, 450-dpi PNGs, joined data, exact input hashes."""

from __future__ import annotations

import csv
import hashlib
import json
import statistics
from pathlib import Path

import msgspec
import pytest
from PIL import Image
from pypdf import PdfReader

from campaign_builder import gpu as campaigns
from throughput_report.cli import main
from throughput_report.pdf import protocol_text
from throughput_report.report import FIGURE_FILES, REPORT_FILES
from throughput_schema.records import Protocol


@pytest.fixture(scope="module")
def report(two_pairs, tmp_path_factory) -> Path:
    throughput, optimizer = two_pairs
    out = tmp_path_factory.mktemp("reports") / "combined"
    argv = ["--throughput", *map(str, throughput), "--optimizer", *map(str, optimizer), "--output", str(out)]
    assert main(argv) == 0
    return out


def test_every_output_is_written(report):
    assert sorted(p.name for p in report.iterdir()) == sorted(REPORT_FILES)
    assert len(FIGURE_FILES) == 15
    assert not [p for p in report.parent.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_pdf_has_six_pages_with_expected_text(report, two_pairs):
    pages = [page.extract_text() for page in PdfReader(report / "report.pdf").pages]
    assert len(pages) == 6
    expected = [
        [
            "Training-time estimates at 20 tokens per parameter",
            "20m",
            "250m",
            "Window range",
            "Complete",
            "Optimizer",
            "exclude startup",
            "orig-throughput",
        ],
        ["Throughput vs batch", "Memory vs batch", "capacity: NVIDIA H200", "first CUDA OOM", "original sweep"],
        ["Optimizer share vs batch", "Share of", "Baseline", "20m-c512", "250m-c2048"],
        ["Projected training time", "not a confidence interval", "complete final updates", "checkpointing"],
        ["Context comparison", "tokens per update", "optimizer 2× faster", "optimizer 4× faster"],
        ["Methods and inputs", "inputs.sha256", "manifest.json SHA-256", "convergence"],
    ]
    for number, (text, needles) in enumerate(zip(pages, expected), start=1):
        for needle in needles:
            assert needle in text, f"page {number} lacks {needle!r}"
    # The protocol is read from the manifests, not assumed (pypdf may break lines anywhere).
    flat = [" ".join(text.split()) for text in pages]
    assert "Measurement windows of 10 s" in flat[0]
    assert "5 synchronised windows of 10 s (at least 20 updates each; 5 more when the CV exceeds 5%)" in flat[5]
    # The median of the primary shares, as points.json gives them.
    doc = json.loads((report / "points.json").read_text())
    primary = {(c["model"], c["context"], c["primary_batch"]) for c in doc["curves"]}
    shares = [p["optimizer_share"] for p in doc["points"] if (p["model"], p["context"], p["batch"]) in primary]
    assert len(shares) == 6
    assert f"median {statistics.median(shares):.1%}" in flat[0]
    # The recommended batch: a page-1 column, one per curve in points.json, the threshold in the methods.
    assert "Recom-" in pages[0]
    for c in doc["curves"]:
        r = c["recommendation"]
        assert r["recommended_batch"] in r["equally_fast"] and r["first_oom_batch"] == c["first_oom_batch"]
    threshold = doc["curves"][0]["recommendation"]["threshold"]
    assert f"Here T = {100 * threshold:.2f}%, from the baseline workers' windows." in flat[5]
    assert "the smallest of them is recommended" in flat[5]
    # Page 6 carries the exact manifest hash of every input campaign.
    for campaign in [*two_pairs[0], *two_pairs[1]]:
        digest = hashlib.sha256((campaign / "manifest.json").read_bytes()).hexdigest()
        assert digest in pages[5]


def test_protocol_text_names_each_campaigns_protocol_when_they_differ():
    short = msgspec.structs.replace(Protocol(), window_seconds=2.0)
    same = protocol_text([("t", short), ("o", short)])
    assert same.startswith("Protocol of every campaign: 20 warm-up and 5 calibration updates")
    assert "windows of 2 s" in same and "10 s" not in same
    differ = protocol_text([("t", Protocol()), ("o", short)])
    assert differ.startswith("Protocols differ between campaigns: t: ") and "; o: " in differ
    assert "windows of 10 s" in differ and "windows of 2 s" in differ


def test_every_png_is_450_dpi(report):
    pngs = sorted(report.glob("*.png"))
    assert len(pngs) == 5
    for png in pngs:
        with Image.open(png) as image:
            assert [round(v) for v in image.info["dpi"]] == [450, 450], png.name
            assert image.size[0] >= 11 * 450 * 0.99


def test_inputs_sha256_lists_every_input_file_exactly(report, two_pairs):
    lines = (report / "inputs.sha256").read_text().splitlines()
    listed = {}
    for line in lines:
        digest, path = line.split("  ", 1)
        listed[path] = digest
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
    for campaign in [*two_pairs[0], *two_pairs[1]]:
        wanted = [campaign / "manifest.json"]
        for name in ("result.json", "baseline.json", "bursts.jsonl", "receipt.json"):
            wanted += list(campaign.glob(f"curves/*/*/*/{name}"))
        assert {str(p) for p in wanted} <= set(listed)


def test_points_csv_and_json_join_every_point(report, two_pairs):
    rows = list(csv.DictReader((report / "points.csv").open()))
    doc = json.loads((report / "points.json").read_text())
    fitting = sum(len(b) for t in two_pairs[0] for b in campaigns.fitting_batches(t).values())
    assert len(rows) == len(doc["points"]) == fitting
    assert len(doc["curves"]) == 6
    for row in doc["points"]:
        assert row["projected_seconds"] == pytest.approx(20 * row["parameters"] / row["tokens_per_second"])
        assert row["complete_updates"] == -(-20 * row["parameters"] // (row["batch"] * row["context"]))
        assert row["throughput_campaign"] in map(str, two_pairs[0])
    assert float(rows[0]["tokens_per_second"]) == doc["points"][0]["tokens_per_second"]


@pytest.mark.slow
def test_a_sixteen_curve_pair_renders_on_six_pages(tmp_path, capsys):
    # No wall-clock bound: its seconds measure the machine's load as much as the report (74 s
    # beside the suite on two busy cores, under 15 alone).
    throughput, optimizer = campaigns.write_pair(
        tmp_path, "full", ["20m", "90m", "250m", "500m"], [512, 1024, 2048, 4096]
    )
    code = main(["--throughput", str(throughput), "--optimizer", str(optimizer), "--output", str(tmp_path / "out")])
    assert code == 0
    assert "16 curves" in capsys.readouterr().out
    assert len(PdfReader(tmp_path / "out" / "report.pdf").pages) == 6


def test_capped_curve_counts_as_complete(tmp_path):
    """A curve that reached the manifest's batch cap without an OOM is ended, not incomplete."""
    import shutil

    import msgspec

    from throughput_report.checks import run_checks
    from throughput_report.inputs import load_campaign
    from throughput_report.pairing import pair_campaigns
    from throughput_report.projections import project
    from throughput_schema import codec
    from throughput_schema.records import Manifest

    t = campaigns.write_throughput(tmp_path / "t", ["20m"], [4096], largest={("20m", 4096): 4})
    shutil.rmtree(t / "curves" / "20m-c4096" / "b8")
    manifest = codec.read(t / "manifest.json", Manifest)
    codec.write_atomic(t / "manifest.json", msgspec.structs.replace(manifest, max_batch=4))
    o = campaigns.write_optimizer(tmp_path / "o", t)
    pairs = pair_campaigns([load_campaign(t)], [load_campaign(o)])
    run_checks(pairs)
    (curve,) = project(pairs).curves
    assert (curve.capped, curve.first_oom_batch, curve.fitting_batches) == (True, None, [1, 2, 4])


def test_audited_output_directory_is_refused(tmp_path, pair, capsys):
    out = tmp_path / "audited"
    out.mkdir()
    (out / "audit.json").write_text("{}")
    code = main(["--throughput", str(pair[0]), "--optimizer", str(pair[1]), "--output", str(out)])
    assert code == 2
    assert "choose a new output directory" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["audit.json"]


def test_report_never_imports_torch():
    import subprocess
    import sys

    code = "import sys, throughput_report.cli, throughput_report.report; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_methods_page_and_points_json_give_each_campaigns_setup_share(report, two_pairs):
    """Summed here from the campaign's own files: every job with a receipt's elapsed time and a result."""
    doc = json.loads((report / "points.json").read_text())
    shares = {Path(c["campaign"]).name: c["setup_share"] for c in doc["inputs"]["campaigns"]}
    flat = " ".join(PdfReader(report / "report.pdf").pages[5].extract_text().split())
    assert "Campaign cost (the scheduler's elapsed time of the jobs with results)" in flat
    for campaign in [*two_pairs[0], *two_pairs[1]]:
        jobs = elapsed = setup = startup = measured = 0.0
        for folder in campaign.glob("curves/*/b*/attempt-*"):
            receipt = json.loads((folder / "receipt.json").read_text())
            results = [
                json.loads(p.read_text()) for p in (folder / "result.json", folder / "baseline.json") if p.exists()
            ]
            jobs += 1
            elapsed += receipt["accounting"]["elapsed_seconds"]
            setup += sum(r.get("setup_seconds") or 0 for r in results)
            startup += sum(r.get("startup_seconds") or 0 for r in results)
            measured += sum(w["seconds"] for r in results for w in r["windows"])
        share = shares[campaign.name]
        assert jobs and (share["jobs"], share["elapsed_seconds"]) == (jobs, elapsed)
        assert share["setup_seconds"] == pytest.approx(setup) and share["startup_seconds"] == pytest.approx(startup)
        assert share["measured_seconds"] == pytest.approx(measured) and setup > 0
        assert f"{campaign.name}: {startup + setup:,.0f} s of {elapsed:,.0f} s of job time" in flat
