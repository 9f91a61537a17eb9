"""The report's tables: formatted rows for the PDF, and the joined CSV/JSON of every point."""

from __future__ import annotations

import csv
import io
from dataclasses import fields

import msgspec

from throughput_report.energy import CARBON_FIELDS, ENERGY_FIELDS, fmt_co2e, fmt_kwh
from throughput_report.projections import Point, Projection
from throughput_schema.muon import GUIDE_OPTIMIZER
from throughput_schema.precision import GUIDE_PRECISION

GIB = 1024**3


def fmt_params(n: int) -> str:
    return f"{n / 1e6:,.1f}M" if n < 1e9 else f"{n / 1e9:,.2f}B"


def fmt_rate(r: float) -> str:
    return f"{r:,.0f}"


def fmt_hours(seconds: float, digits: int = 1) -> str:
    """Minutes below an hour, hours above: readable at print size and still comparable."""
    hours = seconds / 3600.0
    if hours < 1.0:
        return f"{seconds / 60.0:.{digits}f} min"
    return f"{hours:,.{digits + 1}f} h"


def fmt_pct(share: float) -> str:
    return f"{100.0 * share:.1f}%" if share >= 0.001 else f"{100.0 * share:.2f}%"


def key_table(projection: Projection) -> tuple[list[str], list[list[str]]]:
    """Page 1: every curve at its fastest stable batch (primary: uninstrumented baseline),
    with the projected run's energy where the campaigns measured it."""
    header, rows = _key_table(projection)
    if not projection.energy:
        return header, rows
    carbon = projection.carbon_intensity is not None
    header += ["E = 20·P·J/tok\n/ 3.6e6", "Window range\nof E"] + (["CO2e\nE·G"] if carbon else [])
    for curve, row in zip(projection.curves, rows, strict=True):
        p = curve.best
        row += _energy_cells(p) if p is not None else [""] * (3 if carbon else 2)
        if carbon and p is not None:
            row.append(fmt_co2e(p.projected_co2e_kg) if p.projected_co2e_kg is not None else "–")
    return header, rows


def _energy_cells(p: Point) -> list[str]:
    if p.projected_kwh is None or p.projected_kwh_lowest_window is None or p.projected_kwh_highest_window is None:
        return ["not measured", "–"]
    return [
        fmt_kwh(p.projected_kwh),
        f"{fmt_kwh(p.projected_kwh_lowest_window)} – {fmt_kwh(p.projected_kwh_highest_window)}",
    ]


def _key_table(projection: Projection) -> tuple[list[str], list[list[str]]]:
    header = [
        "Model",
        "Params P",
        "Context L",
        "Batch B",
        "Recom-\nmended B",
        "Tokens/s R",
        "T = 20·P/R",
        "Window range\nof T",
        "Time per\n1e9 tokens",
        "Complete\nupdates U",
        "U·B·L / R",
        "Original\nsweep T",
        "Optimizer\nshare",
    ]
    rows = []
    for curve in projection.curves:
        p = curve.best
        if p is None:
            rows.append([curve.model, "", str(curve.context), "none fits"] + [""] * (len(header) - 4))
            continue
        star = "" if curve.best_is_stable else " *"
        rows.append(
            [
                _model_cell(curve.model, p),
                fmt_params(p.parameters),
                f"{p.context:,}",
                f"{p.batch}{star}",
                _recommended(curve),
                fmt_rate(p.tokens_per_second),
                fmt_hours(p.projected_seconds),
                f"{fmt_hours(p.projected_seconds_fastest_window, 2)} – {fmt_hours(p.projected_seconds_slowest_window, 2)}",
                fmt_hours(p.seconds_per_billion_tokens),
                f"{p.complete_updates:,}",
                fmt_hours(p.complete_seconds),
                fmt_hours(p.original_projected_seconds),
                fmt_pct(p.optimizer_share),
            ]
        )
    return header, rows


def _model_cell(model: str, p: Point) -> str:
    """The model, and under it each choice that differs from the guide's (precision, optimizer)."""
    choices = [c for c, guide in ((p.precision, GUIDE_PRECISION), (p.optimizer, GUIDE_OPTIMIZER)) if c != guide]
    return "\n".join([model, *choices])


def _recommended(curve) -> str:
    r = curve.recommendation
    return "-" if r is None or r.recommended_batch is None else str(r.recommended_batch)


def optimizer_table(projection: Projection) -> tuple[list[str], list[list[str]]]:
    header = [
        "Curve",
        "Batch",
        "Optimizer\nms",
        "Baseline\nupdate ms",
        "Share\n(primary)",
        "Share of\ninstr. wall",
        "Share of\ngraph",
        "Instr. wall\nchange",
        "Flags",
    ]
    rows = []
    for curve in projection.curves:
        p = curve.best
        if p is None:
            continue
        flags = []
        if p.instrumented_change_flag:
            flags.append("instr. >5%")
        if p.optimizer_unstable:
            flags.append("optimizer CV>5%")
        if p.unstable:
            flags.append("unstable")
        rows.append(
            [
                curve.curve,
                str(p.batch),
                f"{p.optimizer_ms:.3f}",
                f"{p.update_ms:.2f}",
                fmt_pct(p.optimizer_share),
                fmt_pct(p.share_of_instrumented_wall),
                fmt_pct(p.share_of_graph),
                f"{100 * p.instrumented_wall_change:+.1f}%",
                ", ".join(flags) or "–",
            ]
        )
    return header, rows


def comparison_table(projection: Projection) -> tuple[list[str], list[list[str]]]:
    header = [
        "Model",
        "Context L",
        "Batch B",
        "B·L",
        "T measured",
        "Optimizer\nshare",
        "T, optimizer\n2× faster",
        "T, optimizer\n4× faster",
    ]
    rows = []
    for model in projection.models:
        for context in projection.contexts:
            p = projection.comparison.get((model, context))
            if p is None:
                continue
            rows.append(
                [
                    model,
                    f"{context:,}",
                    str(p.batch),
                    f"{p.tokens_per_update:,}",
                    fmt_hours(p.projected_seconds),
                    fmt_pct(p.optimizer_share),
                    fmt_hours(p.counterfactual_2x_seconds),
                    fmt_hours(p.counterfactual_4x_seconds),
                ]
            )
    return header, rows


def columns(points: list[Point]) -> list[str]:
    """The joined data's columns: energy only where some point measured it, emissions only
    with a carbon intensity, so that campaigns without energy give the data they always did."""
    left = set()
    if all(p.joules_per_token is None for p in points):
        left |= set(ENERGY_FIELDS)
    if all(p.projected_co2e_kg is None for p in points):
        left |= set(CARBON_FIELDS)
    return [f.name for f in fields(Point) if f.name not in left]


def points_csv(points: list[Point], banner: str = "") -> str:
    """One row a point; a test worker's banner is a column of every row, so that no row
    copied out of the file can pass for a measurement."""
    names = columns(points)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*names, "test_worker"] if banner else names)
    for p in points:
        row = [repr(v) if isinstance(v, float) else v for v in (getattr(p, n) for n in names)]
        writer.writerow([*row, banner] if banner else row)
    return buffer.getvalue()


def points_json(projection: Projection, inputs: dict) -> bytes:
    curves = [
        {
            "curve": c.curve,
            "model": c.model,
            "context": c.context,
            "parameters": c.parameters,
            "fitting_batches": c.fitting_batches,
            "largest_fitting_batch": c.largest_fitting_batch,
            "first_oom_batch": c.first_oom_batch,
            "capped": c.capped,
            "fastest_stable_batch": c.best.batch if c.best and c.best_is_stable else None,
            "primary_batch": c.best.batch if c.best else None,
            "original_fastest_batch": c.original_best_batch,
            **({"closed_by_hand": c.closed} if c.closed else {}),
            "recommendation": msgspec.to_builtins(c.recommendation) if c.recommendation else None,
        }
        for c in projection.curves
    ]
    names = columns(projection.points)
    doc = {
        "tokens_per_parameter": 20,
        "context_comparison_tokens_per_update": projection.tokens_per_update,
        **(
            {"carbon_intensity_g_co2e_per_kwh": projection.carbon_intensity}
            if projection.carbon_intensity is not None and projection.energy
            else {}
        ),
        "inputs": inputs,
        "curves": curves,
        "points": [{n: getattr(p, n) for n in names} for p in projection.points],
    }
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"
