"""Energy in a campaign's outputs, on campaigns built from schema records with and without
the GPU's energy counter: results.csv and results.json per point, energy.png only where a
point measured energy (collect says so in one line otherwise), each curve's most
energy-efficient stable batch beside its fastest, the recommendation's prices where the two
differ, and the measured kWh so far in status and the README beside the GPU-hours."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import msgspec
import pytest

from campaign_builder.complete import build_optimizer, build_throughput
from throughput_schema import WorkerResult, read, write_atomic
from throughput_schema.energy import EnergySource, derive_window, summarize
from throughput_sweep.campaign import open_campaign
from throughput_sweep.cli import main
from throughput_sweep.collect import NO_ENERGY_FIGURE, collect
from throughput_sweep.status import render_status

# Board power by batch: the builder's rate grows with the batch, so J/token (watts over
# tokens/s) is lowest at 2 (200 W at twice batch 1's rate), while 4 is the fastest.
WATTS = {1: 150.0, 2: 200.0, 4: 500.0}
SETUP_JOULES = 3_000.0


def with_energy(
    root: Path, watts: dict[int, float] = WATTS, *, reason: str = "", name: str = "result.json"
) -> dict[Path, float]:
    """Give every result (`name`) that measured windows the energy a counter read at `watts`
    would have (or, with `reason`, none and that reason); each result's counted joules by path."""
    counted = {}
    for path in sorted(root.glob(f"curves/*/b*/attempt-*/{name}")):
        r = read(path, WorkerResult)
        if not r.windows:
            continue
        if reason:
            write_atomic(path, msgspec.structs.replace(r, energy_unavailable=reason))
            continue
        batch, context = r.recipe.training.micro_batch_size, r.recipe.model.context_length
        counter, windows = 7_000_000, []
        for w in r.windows:
            mj = round(watts[batch] * w.seconds * 1000)
            windows.append(
                msgspec.structs.replace(
                    w, energy=derive_window(counter, counter + mj, w.seconds, w.updates * batch * context)
                )
            )
            counter += mj + 50_000  # the counter runs on between windows
        energy = summarize(
            [w.energy for w in windows if w.energy is not None],
            EnergySource(device_index=0, device_name="test board"),
            power_limit_watts=700.0,
            setup_joules=SETUP_JOULES,
            setup_seconds=30.0,
        )
        write_atomic(path, msgspec.structs.replace(r, windows=windows, energy=energy))
        counted[path] = sum(round(watts[batch] * w.seconds * 1000) / 1000 for w in r.windows) + SETUP_JOULES
    return counted


@pytest.fixture
def plain(tmp_path) -> Path:
    return build_throughput(tmp_path / "plain", scheduler="local").root


@pytest.fixture
def measured(tmp_path) -> tuple[Path, dict[Path, float]]:
    root = build_throughput(tmp_path / "measured", scheduler="local").root
    return root, with_energy(root)


def _points(root: Path) -> list[dict]:
    return json.loads((root / "results.json").read_text())["points"]


def test_results_carry_joules_per_token_and_mean_power_per_point(measured):
    root, _ = measured
    collect(open_campaign(root))
    rows = list(csv.DictReader((root / "results.csv").open()))
    header = next(csv.reader((root / "results.csv").open()))
    assert header.index("joules_per_token") == header.index("update_ms") + 1
    assert header.index("mean_watts") == header.index("joules_per_token") + 1
    for row, point in zip(rows, _points(root), strict=True):
        if point["status"] != "ok":  # the OOM at 8 measured nothing
            assert row["joules_per_token"] == row["mean_watts"] == "" and point["joules_per_token"] is None
            continue
        r = read(root / f"curves/{point['curve']}/b{point['batch_size']}/attempt-1/result.json", WorkerResult)
        tokens = point["batch_size"] * point["context_length"]
        expected = statistics.median(
            (w.energy.end_mj - w.energy.start_mj) / 1000 / (w.updates * tokens) for w in r.windows
        )
        assert point["joules_per_token"] == pytest.approx(expected)
        assert point["mean_watts"] == pytest.approx(WATTS[point["batch_size"]], rel=1e-4)
        assert float(row["joules_per_token"]) == pytest.approx(expected)


def test_each_curve_names_its_most_efficient_stable_batch_beside_its_fastest(measured):
    root, _ = measured
    written = collect(open_campaign(root))
    assert root / "energy.png" in written and (root / "energy.png").read_bytes().startswith(b"\x89PNG")
    points = [p for p in _points(root) if p["status"] == "ok"]
    for c in json.loads((root / "results.json").read_text())["curves"]:
        mine = [p for p in points if p["curve"] == c["curve"]]
        best = min(mine, key=lambda p: p["joules_per_token"])
        assert (c["most_efficient_batch"], c["most_efficient_joules_per_token"]) == (2, best["joules_per_token"])
        assert c["fastest_stable_batch"] == 4 == c["recommendation"]["recommended_batch"]
        e = c["recommendation"]["efficiency"]
        assert e["batch"] == 2 and e["equally_efficient"] == [2]
        assert e["recommended_joules_per_token"] == next(p["joules_per_token"] for p in mine if p["batch_size"] == 4)
    readme = (root / "README.md").read_text()
    assert "| recommended | most energy-efficient stable batch | J/token | unstable |" in readme
    assert "|---" * 11 + "|" in readme
    assert "The most energy-efficient stable batch has the lowest median joules per token" in readme
    assert "most energy-efficient stable batch 2 (" in readme and "per 10^9 tokens batch 4 takes " in readme
    assert "![energy](energy.png)" in readme and "- `energy.png`: GPU joules per token" in readme


def test_the_energy_so_far_is_the_windows_and_setup_of_the_results_in_kwh(measured):
    root, counted = measured
    joules = sum(counted.values())
    line = (
        f"GPU energy measured so far: {joules / 3.6e6:,.4f} kWh ({joules:,.0f} J) over {len(counted)} result(s), "
        "the GPU board's counter over their windows and setup; the rest of each job is not counted"
    )
    status = render_status(open_campaign(root))
    assert line in status
    assert status.index("GPU-hours so far") < status.index(line)
    assert status.count("    most energy-efficient stable batch: b2 ") == 2
    collect(open_campaign(root))
    assert f"{line}.\n" in (root / "README.md").read_text()


def test_without_energy_no_figure_and_collect_says_so_in_one_line(plain, capsys):
    assert main(["collect", "--output", str(plain)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == NO_ENERGY_FIGURE and sum("energy.png" in x for x in out) == 1
    assert not (plain / "energy.png").exists()
    rows = list(csv.DictReader((plain / "results.csv").open()))
    assert {r["joules_per_token"] for r in rows} == {r["mean_watts"] for r in rows} == {""}
    for c in json.loads((plain / "results.json").read_text())["curves"]:
        assert c["most_efficient_batch"] is None and c["recommendation"]["efficiency"] is None
    readme = (plain / "README.md").read_text()
    status = render_status(open_campaign(plain)).replace(str(plain), "CAMPAIGN")
    for text in (readme, status):  # results from before energy: the outputs of before
        assert "energy" not in text.lower() and "J/token" not in text
    assert "| recommended | unstable |" in readme and "|---" * 9 + "|\n" in readme


def test_results_without_a_counter_say_why_in_status_and_the_readme(plain, capsys):
    with_energy(plain, reason="NVML is not available: no NVIDIA driver")
    line = "GPU energy: not measured (NVML is not available: no NVIDIA driver)"
    assert line in render_status(open_campaign(plain)).splitlines()
    assert main(["collect", "--output", str(plain)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == NO_ENERGY_FIGURE
    assert f"{line}.\n" in (plain / "README.md").read_text()
    assert not (plain / "energy.png").exists()


def test_a_campaign_partly_measured_counts_what_was_and_names_what_was_not(measured):
    root, counted = measured
    [dropped, *_] = counted
    r = read(dropped, WorkerResult)
    write_atomic(dropped, msgspec.structs.replace(r, energy=None, energy_unavailable="no counter on this GPU"))
    joules = sum(v for p, v in counted.items() if p != dropped)
    status = render_status(open_campaign(root))
    assert f"{joules / 3.6e6:,.4f} kWh ({joules:,.0f} J) over {len(counted) - 1} result(s)" in status
    assert "; 1 result(s) without energy (no counter on this GPU)" in status


def test_an_optimizer_follow_up_rates_energy_by_its_baseline_and_counts_both_runs(tmp_path):
    parent = build_throughput(tmp_path / "parent", scheduler="local")
    root = build_optimizer(tmp_path / "opt", parent, scheduler="local").root
    instrumented = with_energy(root, {b: 2 * w for b, w in WATTS.items()})
    baselines = with_energy(root, name="baseline.json")
    written = collect(open_campaign(root))
    assert root / "energy.png" in written
    for point in _points(root):  # the point's figures are its baseline's, as its rate is
        assert point["mean_watts"] == pytest.approx(WATTS[point["batch_size"]], rel=1e-4)
    joules = sum(instrumented.values()) + sum(baselines.values())
    assert (
        f"{joules / 3.6e6:,.4f} kWh ({joules:,.0f} J) over {len(instrumented) * 2} result(s)"
        in (root / "README.md").read_text()
    )
    for c in json.loads((root / "results.json").read_text())["curves"]:
        assert c["most_efficient_batch"] == 2
