"""The report from a campaign pair built through the real local Slurm with the scripted worker.

A throughput campaign of 20m at context 512 (CUDA OOM at batch 4) and its parallel
optimizer follow-up run through real sbatch; `throughput-report --throughput A
--optimizer C --output OUT` then exits 0 with a six-page PDF, five figures in PDF, SVG
and PNG, and the joined data.
"""

from __future__ import annotations

import json

import pytest
from pypdf import PdfReader

from optimizer_campaigns import audit, pair, report
from throughput_report.report import FIGURE_FILES, REPORT_FILES

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]


def test_report_of_a_real_slurm_campaign_pair(local_slurm, tmp_path):
    throughput, optimizer = pair(tmp_path, contexts=(512,), parallel=True)
    assert audit(optimizer).returncode == 0
    out = tmp_path / "report"
    proc = report([throughput], [optimizer], out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES)
    assert len(PdfReader(out / "report.pdf").pages) == 6
    for name in FIGURE_FILES:
        data = (out / name).read_bytes()
        assert len(data) > 1000, name
        if name.endswith(".png"):
            assert data[:8] == b"\x89PNG\r\n\x1a\n", name
    text = "\n".join(page.extract_text() for page in PdfReader(out / "report.pdf").pages)
    assert "20m" in text and "20m-c512" in text
    # The inputs are recorded by hash; the campaigns themselves are not touched.
    assert not (throughput / "report.pdf").exists() and not (optimizer / "report.pdf").exists()
    joined = [p for p in out.iterdir() if p.suffix == ".json"]
    assert joined and all(json.loads(p.read_text()) for p in joined)
