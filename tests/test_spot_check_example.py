"""The published H200 spot check (docs/examples/h200-spot-check): its reading quotes the files."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs/examples/h200-spot-check"
READING = (ROOT / "docs/examples/h200-spot-check.md").read_text()


def comparison() -> dict:
    return json.loads((FOLDER / "comparison.json").read_text())


def test_the_reading_table_is_the_comparison():
    c = comparison()
    assert c["spot_check"] is True and c["kind"] == "throughput"
    for p in c["points"]:
        row = (
            f"| {p['curve']} | {p['batch_size']} | {p['tokens_per_second_a']:,.0f} | "
            f"{p['tokens_per_second_b']:,.0f} | {p['ratio']:.4f} | {p['verdict']} |"
        )
        assert row in READING, row
    verdicts = [p["verdict"] for p in c["points"]]
    assert verdicts.count("faster") == 3 and verdicts.count("same") == 3 and len(verdicts) == 6
    assert f"{100 * c['noise']['threshold']:.2f}%" == "1.54%" and "1.54%" in READING
    assert f"{100 * c['noise']['window_spread_b']:.2f}%" in READING


def test_the_audit_failed_on_exactly_the_faster_points():
    summary = (FOLDER / "summary.txt").read_text()
    faster = [p for p in comparison()["points"] if p["verdict"] == "faster"]
    fails = [line for line in summary.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == len(faster) == 3
    for p in faster:
        assert any(f"{p['curve']} b{p['batch_size']} " in line and "spot_check.within_noise" in line for line in fails)
    assert "3 failed" in summary
