"""The energy of the projected training run: kWh for 20·P tokens at a point's measured joules
per token, the window range, and the emissions for a grid figure the user gives.

    E = 20·P · J/token / 3.6e6 kWh        emissions = E · G / 1000 kg CO2e  (G in gCO2e/kWh)

J/token is the baseline worker's (the primary rate's) median window, as its result records
it; the range comes from its windows of least and most joules per token. The records and
their arithmetic are the schema's (`throughput_schema.energy`).
"""

from __future__ import annotations

from throughput_report.pairing import Pair
from throughput_schema.energy import kwh
from throughput_schema.records import WorkerResult

TOKENS_PER_PARAMETER = 20
# The Point fields that exist only where energy was measured, and only with a carbon intensity.
ENERGY_FIELDS = (
    "joules_per_token",
    "mean_watts",
    "power_limit_watts",
    "projected_kwh",
    "projected_kwh_lowest_window",
    "projected_kwh_highest_window",
)
CARBON_FIELDS = ("projected_co2e_kg", "projected_co2e_kg_lowest_window", "projected_co2e_kg_highest_window")


def projected_kwh(parameters: int, joules_per_token: float) -> float:
    return kwh(TOKENS_PER_PARAMETER * parameters * joules_per_token)


def co2e_kg(energy_kwh: float, grams_per_kwh: float) -> float:
    return energy_kwh * grams_per_kwh / 1000.0


def point_energy(result: WorkerResult, parameters: int, carbon_intensity: float | None) -> dict[str, float | None]:
    """The energy fields of a joined point from its baseline result; {} where it records none."""
    e = result.energy
    per_window = [w.energy.joules_per_token for w in result.windows if w.energy is not None]
    if e is None or not per_window:
        return {}
    energy = {
        "joules_per_token": e.joules_per_token,
        "mean_watts": e.mean_watts,
        "power_limit_watts": e.power_limit_watts,
        "projected_kwh": projected_kwh(parameters, e.joules_per_token),
        "projected_kwh_lowest_window": projected_kwh(parameters, min(per_window)),
        "projected_kwh_highest_window": projected_kwh(parameters, max(per_window)),
    }
    if carbon_intensity is not None:
        for field, source in zip(CARBON_FIELDS, ENERGY_FIELDS[3:], strict=True):
            energy[field] = co2e_kg(energy[source] or 0.0, carbon_intensity)
    return energy


def _figure(x: float) -> str:
    """Three significant figures or more, never in exponent notation."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_kwh(value: float) -> str:
    """kWh, or Wh below one kWh."""
    return f"{_figure(value)} kWh" if value >= 1.0 else f"{_figure(1000 * value)} Wh"


def fmt_co2e(kg: float) -> str:
    """kg CO2e, or g below one kg."""
    return f"{_figure(kg)} kg" if kg >= 1.0 else f"{_figure(1000 * kg)} g"


def energy_absent(pairs: list[Pair]) -> str:
    """Why the primary workers recorded no energy, as their results say (the first reason)."""
    for pair in pairs:
        for name, curve in pair.curves.items():
            for batch in curve.fitting:
                base = pair.points[name][batch].attempt.measured_baseline
                if base.energy is None and base.energy_unavailable:
                    return f"{pair.optimizer.name}: {base.energy_unavailable}"
    return "their results were written before energy was measured"
