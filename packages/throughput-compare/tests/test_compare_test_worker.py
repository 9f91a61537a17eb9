"""A test worker's campaigns are no hardware comparison: refused in one line, with nothing
written, unless --allow-test-worker is given; then every file, figure and page says so,
in the banner the audit and the report carry."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pypdf
import pytest
from PIL import Image

from throughput_compare.cli import main
from throughput_schema.provenance import allowed_worker_banner

BANNER = allowed_worker_banner("scripted_worker")
TEST_WORKER = {"module": "scripted_worker", "version": "test", "written_by": "worker"}


def as_test_worker(built) -> None:
    """A campaign a test worker ran: its manifest and every result name it."""

    def edit(path: Path, change) -> None:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2))

    edit(built.root / "manifest.json", lambda m: m.update(worker="scripted_worker"))
    for path in built.root.glob("curves/*/b*/attempt-*/result.json"):
        edit(path, lambda r: r.update(worker=TEST_WORKER))


def build(lab, name: str, test: bool) -> Path:
    return lab.build(name, edit=as_test_worker, allow_test_worker=True) if test else lab.build(name)


def red_foot(png: Path) -> int:
    """Pixels of the banner's red along the foot of a figure, where the banner is drawn."""
    pixels = np.asarray(Image.open(png).convert("RGB")).astype(int)
    foot = pixels[int(pixels.shape[0] * 0.97) :]
    return int(((foot[..., 0] > 150) & (foot[..., 1] < 60) & (foot[..., 2] < 60)).sum())


def run(a, b, out, *extra) -> int:
    return main([str(a), str(b), "--output", str(out), *extra])


def test_a_test_workers_campaign_is_refused_in_one_line_with_nothing_written(lab, tmp_path, capsys):
    real, test = build(lab, "real", False), build(lab, "test", True)
    for a, b, label in ((test, real, "A"), (real, test, "B"), (test, test, "A")):
        out = tmp_path / f"out-{label}"
        assert run(a, b, out) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert captured.out == "" and len(lines) == 1 and "Traceback" not in captured.err
        assert lines[0] == (
            f"throughput-compare: {label} {test}: campaign run with test worker 'scripted_worker', not the "
            "production worker 'tiny_llm'; its figures were never measured (give --allow-test-worker to let a test through)"
        )
        assert not out.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


@pytest.mark.slow  # writes and reads every output
def test_with_the_flag_every_file_figure_and_page_carries_the_banner(lab, tmp_path, capsys):
    a, b = build(lab, "a", True), build(lab, "b", True)
    out = tmp_path / "out"
    assert run(a, b, out, "--allow-test-worker") == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0] == BANNER and printed[-1] == BANNER
    md = (out / "comparison.md").read_text().strip().splitlines()
    assert BANNER in md[0] and BANNER in md[-1]
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert rows and all(row["test_worker"] == BANNER for row in rows)
    assert json.loads((out / "comparison.json").read_text())["test_worker"] == BANNER
    for pdf in ("comparison.pdf", "ratios.pdf"):
        pages = pypdf.PdfReader(out / pdf).pages
        assert all(BANNER in " ".join(page.extract_text().split()) for page in pages), pdf
    assert BANNER in (out / "ratios.svg").read_text()
    assert red_foot(out / "ratios.png") > 1000  # the PNG carries it as drawn text


def test_the_production_worker_has_no_banner(lab, tmp_path, capsys):
    a, b = build(lab, "a", False), build(lab, "b", False)
    out = tmp_path / "out"
    assert run(a, b, out, "--allow-test-worker") == 0  # the flag lets a test through; it marks nothing real
    assert "TEST WORKER" not in capsys.readouterr().out
    assert "TEST WORKER" not in (out / "comparison.md").read_text()
    assert "test_worker" not in (out / "comparison.csv").read_text().splitlines()[0]
    assert json.loads((out / "comparison.json").read_text())["test_worker"] == ""
    assert red_foot(out / "ratios.png") == 0
