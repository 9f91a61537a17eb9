"""What the command writes and when it refuses: the files, the two-page PDF, the 450-dpi
PNG, the input hashes, refusals in one line with nothing written, and no torch."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pypdf
import pytest
from PIL import Image

from throughput_compare.cli import main
from throughput_compare.figures import PNG_DPI
from throughput_schema.layout import AUDIT

FILES = {
    "comparison.md",
    "comparison.csv",
    "comparison.json",
    "comparison.pdf",
    "ratios.pdf",
    "ratios.svg",
    "ratios.png",
}


def run(a, b, out, *extra) -> int:
    return main([str(a), str(b), "--output", str(out), *extra])


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_outputs_exist_with_a_two_page_pdf_and_a_450_dpi_png(lab, tmp_path):
    a, b = lab.build("a"), lab.build("b", edit=lambda built: lab.remeasure(built, slower=1 / 1.1))
    out = tmp_path / "out"
    assert run(a, b, out) == 0
    assert {p.name for p in out.iterdir()} == FILES
    assert len(pypdf.PdfReader(out / "comparison.pdf").pages) == 2
    assert len(pypdf.PdfReader(out / "ratios.pdf").pages) == 1
    dpi = Image.open(out / "ratios.png").info["dpi"]
    assert round(dpi[0]) == PNG_DPI and round(dpi[1]) == PNG_DPI
    assert (out / "ratios.svg").read_text().lstrip().startswith("<?xml")
    c = json.loads((out / "comparison.json").read_text())
    rows = (out / "comparison.csv").read_text().splitlines()
    assert len(rows) == 1 + len(c["points"]) and rows[0].startswith("curve,batch_size,")
    page_one = pypdf.PdfReader(out / "comparison.pdf").pages[0].extract_text()
    assert "faster" in page_one and "Differences" in page_one


def test_every_input_file_is_hashed(lab, tmp_path):
    a, b = lab.build("a"), lab.build("b")
    out = tmp_path / "out"
    assert run(a, b, out) == 0
    inputs = json.loads((out / "comparison.json").read_text())["inputs"]
    names = {Path(i["path"]).name for i in inputs}
    assert {"manifest.json", AUDIT, "result.json"} <= names
    markdown = (out / "comparison.md").read_text()
    for item in inputs:
        assert hashlib.sha256(Path(item["path"]).read_bytes()).hexdigest() == item["sha256"]
        assert f"`{item['sha256']}` {item['path']}" in markdown
    assert sum(1 for i in inputs if i["path"].startswith(str(a))) == 2 + sum(1 for _ in a.rglob("result.json"))


def test_refuses_to_overwrite(lab, tmp_path, capsys):
    a, b = lab.build("a"), lab.build("b")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert run(a, b, out) == 2
    assert "is not empty" in one_line(capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(a, b, empty) == 0 and {p.name for p in empty.iterdir()} == FILES
    assert run(a, b, empty) == 2
    assert "never overwritten" in one_line(capsys)


def test_unaudited_or_failed_audit_is_refused(lab, tmp_path, capsys):
    a = lab.build("a")
    bare = lab.unaudited("bare").root
    assert run(a, bare, tmp_path / "out") == 2
    assert one_line(capsys) == (
        f"throughput-compare: B {bare}: not audited (no {AUDIT}); run `throughput-audit --output {bare}` first"
    )
    audit = json.loads((a / AUDIT).read_text())
    audit["summary"]["failed"] = 3
    (a / AUDIT).write_text(json.dumps(audit))
    b = lab.build("b")
    assert run(a, b, tmp_path / "out") == 2
    assert "its audit records 3 failed checks" in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_bad_input_is_one_line_and_nothing_written(lab, tmp_path, capsys):
    a, b = lab.build("a"), lab.build("b")
    broken = next(b.rglob("result.json"))
    broken.write_text('{"outcome": ')
    assert run(a, b, tmp_path / "out") == 2
    line = one_line(capsys)
    assert str(broken) in line and "re-run the point" in line
    assert run(tmp_path / "nowhere", a, tmp_path / "out") == 2
    assert "not a campaign folder" in one_line(capsys)
    assert run(a, a, a / "inside") == 2
    assert "lies inside input campaign" in one_line(capsys)
    assert not (tmp_path / "out").exists() and not (a / "inside").exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_torch_is_never_imported(lab, tmp_path):
    a, b = lab.build("a"), lab.build("b")
    code = (
        "import sys\n"
        "from throughput_compare.cli import main\n"
        f"assert main([{str(a)!r}, {str(b)!r}, '--output', {str(tmp_path / 'out')!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["only-one"])
    assert exited.value.code == 2
    assert "(see --help)" in one_line(capsys)
