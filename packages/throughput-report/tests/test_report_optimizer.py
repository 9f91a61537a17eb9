"""The report's methods page names an optimizer other than the guide's AdamW."""

from __future__ import annotations

from throughput_report.pdf import optimizer_text
from throughput_schema import Protocol


def test_the_guides_adamw_needs_no_paragraph_and_muon_gets_one_naming_its_settings():
    assert optimizer_text([("tp", Protocol()), ("opt", Protocol())]) == []
    muon = Protocol(optimizer="muon")
    (line,) = optimizer_text([("tp", muon), ("opt", muon)])
    assert line.startswith("Optimizer: muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps (3.4445, -4.775, 2.0315)")
    assert "not the guide's AdamW" in line and "ArenaMuon.step" in line
