"""The committed worked example (docs/examples/) stays true.

The archive `docs/examples/h200-e2e-state/e2e-h200.tar.gz` holds the H200 run's campaign
folders as they came back from the GPU machine. Unpacked anywhere, each campaign must pass
`throughput-audit`, every throughput curve must end at a confirmed `cuda_oom`, collect's
results must equal the published `docs/examples/e2e-h200/` copy, the report must rebuild
from the archive (its checks passing) into the published data and figures, and the
reading in `docs/examples/README.md` must quote those results.
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
from pypdf import PdfReader

from throughput_report import tables

pytestmark = pytest.mark.slow  # re-audits and rebuilds the committed H200 example

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
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TZ": tz},
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
    stated = re.search(r"the CV is at most ([\d.]+)% at every point", " ".join(reading.split()))
    assert stated and max(p["cv"] for p in points if p["cv"] is not None) * 100 <= float(stated.group(1))
    for c in _curves(PUBLISHED / "throughput/results.json"):
        row = re.search(rf"^\| {re.escape(c['curve'])} \|(.*)$", reading, re.MULTILINE)
        assert row, f"no row for {c['curve']} in docs/examples/README.md"
        cells = [x.strip() for x in row.group(1).split("|")]
        assert cells[0] == str(c["fastest_stable_batch"])
        assert cells[1] == f"{c['fastest_tokens_per_second']:,.0f}"
        largest = next(
            p
            for p in points
            if p["curve"] == c["curve"] and p["batch_size"] == c["largest_fitting_batch"] and p["status"] == "ok"
        )
        peak = max(largest["setup_reserved_bytes"], largest["measurement_reserved_bytes"]) / 2**30
        assert cells[3] == f"{c['largest_fitting_batch']} ({peak:.1f} GiB)"
        assert cells[4].startswith(f"{c['first_oom_batch']},")


def test_optimizer_follow_up_is_complete_and_audits_clean(worked_example):
    assert (worked_example / "STATE.txt").read_text().strip() == "complete"
    campaign = worked_example / "optimizer"
    audited = _cli("throughput_audit.cli", "--output", str(campaign))
    assert audited.returncode == 0, audited.stdout + audited.stderr
    report = json.loads((campaign / "audit.json").read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] > 1000


def _without_paths(points_json: Path) -> dict:
    doc = json.loads(points_json.read_text())
    for p in doc["points"]:
        del p["throughput_campaign"], p["optimizer_campaign"]
        # The archive's report, the GPU machine's, was made before points carried their
        # precision: the run was BF16, the default.
        assert p.pop("precision", "bf16") == "bf16", p
        assert p.pop("optimizer", "adamw") == "adamw", p  # and their optimizer: AdamW
    # ...and before the report recommended a batch; a rebuild adds each curve's
    # recommendation, tested in throughput-report.
    for c in doc["curves"]:
        c.pop("recommendation", None)
    del doc["inputs"]
    return doc


def test_the_published_report_rebuilds_from_the_archive(worked_example, tmp_path):
    out = tmp_path / "report"
    built = _cli(
        "throughput_report.cli",
        "--throughput",
        str(worked_example / "throughput"),
        "--optimizer",
        str(worked_example / "optimizer"),
        "--output",
        str(out),
    )
    assert built.returncode == 0, built.stdout + built.stderr  # its independent checks passed
    assert _without_paths(out / "points.json") == _without_paths(PUBLISHED / "report/points.json")
    assert _without_paths(PUBLISHED / "report/points.json") == _without_paths(worked_example / "report/points.json")
    # The published report read the same files, at the run's own paths.
    run_root = "/work/main/runs/e2e-h200"
    rebuilt = (out / "inputs.sha256").read_text().replace(str(worked_example), run_root)
    assert rebuilt == (PUBLISHED / "report/inputs.sha256").read_text()
    for name in ("throughput", "memory", "optimizer-share", "training-time", "context-comparison"):
        assert (out / f"{name}.svg").read_bytes() == (PUBLISHED / f"report/{name}.svg").read_bytes(), name
    # The published PDF states the protocol the campaigns ran, 2 s windows.
    pages = [" ".join(page.extract_text().split()) for page in PdfReader(PUBLISHED / "report/report.pdf").pages]
    assert "Measurement windows of 2 s" in pages[0]
    assert "5 synchronised windows of 2 s" in pages[5] and "ten seconds" not in pages[5]
    # Its campaigns' setup share, as the rebuilt report derives it from the receipts and results.
    shares = [
        [c["setup_share"] for c in json.loads((where / "points.json").read_text())["inputs"]["campaigns"]]
        for where in (out, PUBLISHED / "report")
    ]
    assert shares[0] == shares[1] and shares[0][0]["jobs"] == 42
    assert "throughput: 1,427 s of 2,439 s of job time (59%) over 42 job(s)" in pages[5]


def _primary_points(doc: dict) -> list[tuple[dict, dict]]:
    """(curve, its point at the primary batch) from the report's points.json."""
    points = {(p["model"], p["context"], p["batch"]): p for p in doc["points"]}
    return [(c, points[(c["model"], c["context"], c["primary_batch"])]) for c in doc["curves"]]


def test_the_reading_quotes_the_report():
    reading = (EXAMPLES / "README.md").read_text()
    doc = json.loads((PUBLISHED / "report/points.json").read_text())
    for c, p in _primary_points(doc):
        row = re.search(rf"^\| {c['model']} \| {c['context']} \|(.*)$", reading, re.MULTILINE)
        assert row, f"no projection row for {c['curve']} in docs/examples/README.md"
        cells = [x.strip() for x in row.group(1).split("|")][:-1]
        assert cells == [
            str(c["primary_batch"]),
            tables.fmt_rate(p["tokens_per_second"]),
            f"{p['optimizer_ms']:.3f}",
            tables.fmt_pct(p["optimizer_share"]),
            tables.fmt_hours(p["projected_seconds"]),
        ], c["curve"]
    spread = [p["tokens_per_second"] / p["original_tokens_per_second"] - 1 for p in doc["points"]]
    assert f"differ by {min(spread):+.1%} to {max(spread):+.1%}" in " ".join(reading.split())


def test_the_project_readme_quotes_the_worked_example():
    summary = " ".join((ROOT / "README.md").read_text().split())
    curves = _curves(PUBLISHED / "throughput/results.json")
    best = {
        m: max(c["fastest_tokens_per_second"] for c in curves if c["curve"].startswith(f"{m}-"))
        for m in ("20m", "250m")
    }
    doc = json.loads((PUBLISHED / "report/points.json").read_text())
    primary = [p for _, p in _primary_points(doc)]
    fastest = {m: min(p["projected_seconds"] for p in primary if p["model"] == m) for m in ("20m", "250m")}
    share = max(p["optimizer_share"] for p in primary)
    assert (
        f"throughput peaks at {best['20m'] / 1e6:.2f} million tokens/s for 20m and {best['250m']:,.0f} for 250m"
        in summary
    )
    assert f"the optimizer step is at most {tables.fmt_pct(share)} of the update" in summary
    assert (
        f"projects {fastest['20m'] / 60:.1f} minutes for 20m and {fastest['250m'] / 3600:.2f} hours for 250m" in summary
    )
