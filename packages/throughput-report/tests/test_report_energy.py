"""The projected run's energy in the report: kWh for 20·P tokens at the primary batch with its
window range, emissions only with --carbon-intensity, in the existing tables and the joined
data only (still six pages and five figures); campaigns without energy report as before."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from pypdf import PdfReader

from campaign_builder import gpu as campaigns
from throughput_report import energy
from throughput_report.cli import main
from throughput_schema import WorkerResult, read, write_atomic
from throughput_schema.layout import BASELINE, attempt_dir

MODELS, CONTEXTS = ["20m", "90m"], [512, 1024]
G = 385.0  # gCO2e/kWh, a grid figure a user would give


def _report(throughput: Path, optimizer: Path, out: Path, *extra: str) -> int:
    return main(["--throughput", str(throughput), "--optimizer", str(optimizer), "--output", str(out), *extra])


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, Path]:
    """The pretend GPU's pair with the energy counter read around every window."""
    root = tmp_path_factory.mktemp("energy")
    return campaigns.write_pair(root, "e", MODELS, CONTEXTS, gpu=campaigns.Gpu(watts=650.0))


@pytest.fixture(scope="module")
def reports(measured, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reports")
    out = {"energy": root / "energy", "carbon": root / "carbon"}
    assert _report(*measured, out["energy"]) == 0
    assert _report(*measured, out["carbon"], "--carbon-intensity", str(G)) == 0
    return out


def _pages(report: Path) -> list[str]:
    return [" ".join(page.extract_text().split()) for page in PdfReader(report / "report.pdf").pages]


def _raw_joules_per_token(optimizer: Path, model: str, context: int, batch: int) -> list[float]:
    """Each baseline window's joules per token from the counter's readings, worked out here."""
    base = read(attempt_dir(optimizer, model, context, batch, 1) / BASELINE, WorkerResult)
    return [
        (w.energy.end_mj - w.energy.start_mj) / 1000 / (w.updates * batch * context)
        for w in base.windows
        if w.energy is not None
    ]


def test_the_joined_data_carries_the_projected_energy(reports, measured):
    doc = json.loads((reports["carbon"] / "points.json").read_text())
    assert doc["carbon_intensity_g_co2e_per_kwh"] == G
    assert len(doc["points"]) == sum(len(b) for b in campaigns.fitting_batches(measured[0]).values())
    for p in doc["points"]:
        per_window = _raw_joules_per_token(measured[1], p["model"], p["context"], p["batch"])
        budget = 20 * p["parameters"]
        assert p["joules_per_token"] == pytest.approx(statistics.median(per_window), rel=1e-9)
        assert p["projected_kwh"] == pytest.approx(budget * statistics.median(per_window) / 3.6e6, rel=1e-9)
        assert p["projected_kwh_lowest_window"] == pytest.approx(budget * min(per_window) / 3.6e6, rel=1e-9)
        assert p["projected_kwh_highest_window"] == pytest.approx(budget * max(per_window) / 3.6e6, rel=1e-9)
        assert p["projected_kwh_lowest_window"] <= p["projected_kwh"] <= p["projected_kwh_highest_window"]
        assert p["projected_co2e_kg"] == pytest.approx(p["projected_kwh"] * G / 1000, rel=1e-12)
        assert 0 < p["mean_watts"] <= p["power_limit_watts"]
    rows = list(csv.DictReader((reports["carbon"] / "points.csv").open()))
    assert float(rows[0]["projected_kwh"]) == doc["points"][0]["projected_kwh"]
    assert float(rows[0]["projected_co2e_kg_highest_window"]) == doc["points"][0]["projected_co2e_kg_highest_window"]
    # Without a grid figure: the energy, and no emissions anywhere.
    plain = json.loads((reports["energy"] / "points.json").read_text())
    assert "carbon_intensity_g_co2e_per_kwh" not in plain
    assert all("projected_kwh" in p and not any(k.startswith("projected_co2e") for k in p) for p in plain["points"])
    assert "co2e" not in (reports["energy"] / "points.csv").read_text().splitlines()[0]


def test_energy_goes_into_the_key_table_of_the_same_six_pages(reports, measured):
    for name, report in reports.items():
        pages = _pages(report)
        assert len(pages) == 6 and len(list(report.glob("*.png"))) == 5, name
        assert "E = 20·P·J/tok" in pages[0] and "Window range of E" in pages[0]
        assert "the GPU's own energy counter" in pages[0] and "not the node, not cooling" in pages[0]
        assert "energy E = 20·P · J/token / 3.6e6 kWh" in pages[5]
    doc = json.loads((reports["carbon"] / "points.json").read_text())
    primary = {(c["model"], c["context"]): c["primary_batch"] for c in doc["curves"]}
    carbon = _pages(reports["carbon"])[0]
    for p in doc["points"]:
        if primary[(p["model"], p["context"])] != p["batch"]:
            continue
        low, high = energy.fmt_kwh(p["projected_kwh_lowest_window"]), energy.fmt_kwh(p["projected_kwh_highest_window"])
        assert f"{energy.fmt_kwh(p['projected_kwh'])} {low} – {high}" in carbon
        assert energy.fmt_co2e(p["projected_co2e_kg"]) in carbon
    assert f"G = {G:g} gCO2e/kWh" in carbon and "CO2e" in carbon
    assert "CO2e" not in " ".join(_pages(reports["energy"]))


def test_campaigns_without_energy_give_the_report_they_always_did(reports, measured, tmp_path):
    # The same pretend GPU without a counter: same rates, same figures, no energy anywhere.
    t, o = campaigns.write_pair(tmp_path, "e", MODELS, CONTEXTS)
    out = tmp_path / "report"
    assert _report(t, o, out) == 0
    for figure in ("throughput", "memory", "optimizer-share", "training-time", "context-comparison"):
        assert (out / f"{figure}.svg").read_bytes() == (reports["energy"] / f"{figure}.svg").read_bytes(), figure
    header = (out / "points.csv").read_text().splitlines()[0].split(",")
    assert not set(header) & {*energy.ENERGY_FIELDS, *energy.CARBON_FIELDS}
    with_energy = list(csv.DictReader((reports["energy"] / "points.csv").open()))
    without = list(csv.DictReader((out / "points.csv").open()))
    for a, b in zip(with_energy, without, strict=True):
        assert {k: v for k, v in a.items() if k not in energy.ENERGY_FIELDS and not k.endswith("campaign")} == {
            k: v for k, v in b.items() if not k.endswith("campaign")
        }
    pages = _pages(out)
    assert len(pages) == 6 and "kWh" not in " ".join(pages) and "energy counter" not in pages[0]


def test_carbon_intensity_without_energy_is_refused(tmp_path, capsys):
    t, o = campaigns.write_pair(tmp_path, "plain", ["20m"], [512])
    assert _report(t, o, tmp_path / "out", "--carbon-intensity", "400") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("throughput-report: refused: --carbon-intensity 400: no baseline worker")
    assert "written before energy was measured" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["0", "-5", "nan", "grid"])
def test_a_carbon_intensity_that_is_not_a_positive_number_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exc:
        _report(tmp_path / "t", tmp_path / "o", tmp_path / "out", "--carbon-intensity", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--carbon-intensity" in err and len(err.splitlines()) == 1


def test_a_window_energy_disagreeing_with_its_readings_stops_the_report(measured, tmp_path, capsys):
    import shutil

    import msgspec

    t, o = (tmp_path / "t", tmp_path / "o")
    shutil.copytree(measured[0], t)
    shutil.copytree(measured[1], o)
    # The pair points at its parent by path: keep the copy's optimizer on the copied throughput.
    manifest = json.loads((o / "manifest.json").read_text())
    manifest["parent"]["path"] = str(t)
    (o / "manifest.json").write_text(json.dumps(manifest))
    path = attempt_dir(o, "20m", 512, 2, 1) / BASELINE
    base = read(path, WorkerResult)
    w = base.windows[1]
    assert w.energy is not None
    doubled = msgspec.structs.replace(w.energy, joules=2 * w.energy.joules)
    windows = [*base.windows[:1], msgspec.structs.replace(w, energy=doubled), *base.windows[2:]]
    write_atomic(path, msgspec.structs.replace(base, windows=windows))
    assert _report(t, o, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert f"{path}: window 1 joules" in err and "but its counter readings" in err


def test_curves_without_energy_beside_curves_with_it_say_not_measured(tmp_path):
    a = campaigns.write_pair(tmp_path, "a", ["20m"], [512], gpu=campaigns.Gpu(watts=650.0))
    b = campaigns.write_pair(tmp_path, "b", ["20m"], [1024])
    out = tmp_path / "out"
    argv = ["--throughput", str(a[0]), str(b[0]), "--optimizer", str(a[1]), str(b[1]), "--output", str(out)]
    assert main(argv) == 0
    page = _pages(out)[0]
    assert "No energy was measured on 20m-c1024." in page and "not measured" in page
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert {r["context"] for r in rows if r["projected_kwh"]} == {"512"}
    assert {r["context"] for r in rows if not r["projected_kwh"]} == {"1024"}
