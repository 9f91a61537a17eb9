"""Training-time projections at 20 tokens per parameter, and the joined point rows.

For P parameters, batch B, context L and rate R tokens/s:
    budget            20·P tokens (fixed per model, whatever the setup)
    ideal time        T = 20·P / R
    per 1e9 tokens    1e9 / R
    complete updates  U = ceil(20·P / (B·L)); U·B·L tokens; U·B·L / R seconds
    optimizer k× faster, all other work unchanged: T' = T·(1 − f + f/k)
    energy            E = 20·P · J/token / 3.6e6 kWh, J/token the baseline's median window
                      (the GPU's own counter); emissions E·G / 1000 kg for G gCO2e/kWh
The primary rate is the optimizer campaign's uninstrumented baseline; the original
sweep's rate is kept beside it as independent comparison data. The window range
(slowest and fastest window; for energy, the windows of least and most joules per token)
is within-run variation, not a confidence interval.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from throughput_report import energy
from throughput_report.checks import cv, window_rates
from throughput_report.pairing import Pair
from throughput_schema.comparison import Recommendation
from throughput_schema.layout import curve_name
from throughput_schema.muon import GUIDE_OPTIMIZER
from throughput_schema.precision import GUIDE_PRECISION
from throughput_schema.recommendation import campaign_recommendations, gpu_memory_bytes, point_rate

TOKENS_PER_PARAMETER = 20
SPEEDUPS = (2, 4)
INSTRUMENT_CHANGE_LIMIT = 0.05


def budget_tokens(parameters: int) -> int:
    return TOKENS_PER_PARAMETER * parameters


def ideal_seconds(parameters: int, rate: float) -> float:
    return TOKENS_PER_PARAMETER * parameters / rate


def seconds_per_billion(rate: float) -> float:
    return 1e9 / rate


def complete_updates(parameters: int, batch: int, context: int) -> int:
    """ceil(20·P / (B·L)) in exact integer arithmetic."""
    return -(-budget_tokens(parameters) // (batch * context))


def counterfactual_seconds(seconds: float, share: float, speedup: float) -> float:
    return seconds * (1.0 - share + share / speedup)


@dataclass(frozen=True)
class Point:
    """One fitting point, joined across the throughput campaign and its optimizer campaign."""

    model: str
    context: int
    batch: int
    parameters: int
    tokens_per_update: int
    budget_tokens: int
    # Primary: the optimizer campaign's uninstrumented baseline.
    tokens_per_second: float
    window_min_tokens_per_second: float
    window_max_tokens_per_second: float
    cv: float
    unstable: bool
    update_ms: float
    # Independent comparison: the original throughput sweep.
    original_tokens_per_second: float
    original_cv: float
    original_unstable: bool
    # Instrumented worker of the same allocation.
    instrumented_tokens_per_second: float
    instrumented_wall_change: float
    instrumented_change_flag: bool
    optimizer_ms: float
    optimizer_cv: float
    optimizer_unstable: bool
    optimizer_share: float
    share_of_instrumented_wall: float
    share_of_graph: float
    # Projections.
    projected_seconds: float
    projected_seconds_fastest_window: float
    projected_seconds_slowest_window: float
    seconds_per_billion_tokens: float
    complete_updates: int
    complete_tokens: int
    complete_seconds: float
    original_projected_seconds: float
    counterfactual_2x_seconds: float
    counterfactual_4x_seconds: float
    # Memory (baseline worker) and the GPU it ran on.
    # None where the point ran on the CPU: no GPU memory to record.
    setup_reserved_bytes: int | None
    measurement_reserved_bytes: int | None
    measurement_allocated_bytes: int | None
    original_measurement_reserved_bytes: int | None
    gpu_name: str
    gpu_memory_bytes: int
    throughput_campaign: str
    optimizer_campaign: str
    # The GPU's measured energy (baseline worker; `energy`), None where it records none.
    # Columns of the joined data only where some point has energy (ENERGY_FIELDS), the
    # emissions only with a carbon intensity (CARBON_FIELDS).
    joules_per_token: float | None = None
    mean_watts: float | None = None
    power_limit_watts: float | None = None
    projected_kwh: float | None = None
    projected_kwh_lowest_window: float | None = None
    projected_kwh_highest_window: float | None = None
    projected_co2e_kg: float | None = None
    projected_co2e_kg_lowest_window: float | None = None
    projected_co2e_kg_highest_window: float | None = None
    # The precision the point trained at (`throughput_schema.precision`): a projection at FP8
    # is a projection of FP8 training, and is labelled so.
    precision: str = GUIDE_PRECISION
    # The optimizer the point trained with (`throughput_schema.muon`), labelled as the precision is.
    optimizer: str = GUIDE_OPTIMIZER

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context)

    def row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CurveRow:
    """A curve's summary: the primary fastest stable batch and its memory boundary."""

    model: str
    context: int
    parameters: int
    fitting_batches: list[int]
    largest_fitting_batch: int | None
    first_oom_batch: int | None
    capped: bool
    best: Point | None
    best_is_stable: bool
    original_best_batch: int | None
    closed: str = ""  # "at batch B: reason" when a person ended the curve; never a boundary
    # The smallest batch within the noise threshold of the fastest (the schema's rule).
    recommendation: Recommendation | None = None

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context)


@dataclass(frozen=True)
class Projection:
    points: list[Point]
    curves: list[CurveRow]
    models: list[str]
    contexts: list[int]
    tokens_per_update: int
    comparison: dict[tuple[str, int], Point]
    carbon_intensity: float | None = None

    @property
    def energy(self) -> bool:
        """Whether any point measured energy: without, the report is as it was before energy."""
        return any(p.joules_per_token is not None for p in self.points)


def join_points(pairs: list[Pair], carbon_intensity: float | None = None) -> list[Point]:
    points: list[Point] = []
    for pair in pairs:
        for name, curve in pair.curves.items():
            for batch in curve.fitting:
                original = curve.finals[batch].measured
                opt = pair.points[name][batch].attempt
                base, instr = opt.measured_baseline, opt.measured
                # check_pair passed these points: each records its throughput, the instrumented
                # one its optimizer timing, and a memory report its measurement peaks.
                base_tp, instr_tp, original_tp = base.throughput, instr.throughput, original.throughput
                timing = instr.optimizer_timing
                assert base_tp and instr_tp and original_tp and timing, "check_pair verified them"
                base_peaks = base.memory.measurement if base.memory else None
                original_peaks = original.memory.measurement if original.memory else None
                L, B, P = curve.context, batch, base.parameters
                rates = window_rates(base, B, L)
                rate = base_tp.tokens_per_second
                seconds = ideal_seconds(P, rate)
                update_ms = 1000.0 * B * L / rate
                share = timing.optimizer_ms / update_ms
                instr_rate = instr_tp.tokens_per_second
                change = rate / instr_rate - 1.0
                U = complete_updates(P, B, L)
                points.append(
                    Point(
                        model=curve.model,
                        context=L,
                        batch=B,
                        parameters=P,
                        tokens_per_update=B * L,
                        budget_tokens=budget_tokens(P),
                        tokens_per_second=rate,
                        window_min_tokens_per_second=min(rates),
                        window_max_tokens_per_second=max(rates),
                        cv=cv(rates),
                        unstable=base_tp.unstable,
                        update_ms=update_ms,
                        original_tokens_per_second=original_tp.tokens_per_second,
                        original_cv=original_tp.cv,
                        original_unstable=original_tp.unstable,
                        instrumented_tokens_per_second=instr_rate,
                        instrumented_wall_change=change,
                        instrumented_change_flag=abs(change) > INSTRUMENT_CHANGE_LIMIT,
                        optimizer_ms=timing.optimizer_ms,
                        optimizer_cv=timing.optimizer_cv,
                        optimizer_unstable=timing.unstable,
                        optimizer_share=share,
                        share_of_instrumented_wall=timing.share_of_wall,
                        share_of_graph=timing.share_of_graph,
                        projected_seconds=seconds,
                        projected_seconds_fastest_window=ideal_seconds(P, max(rates)),
                        projected_seconds_slowest_window=ideal_seconds(P, min(rates)),
                        seconds_per_billion_tokens=seconds_per_billion(rate),
                        complete_updates=U,
                        complete_tokens=U * B * L,
                        complete_seconds=U * B * L / rate,
                        original_projected_seconds=ideal_seconds(P, original_tp.tokens_per_second),
                        counterfactual_2x_seconds=counterfactual_seconds(seconds, share, 2),
                        counterfactual_4x_seconds=counterfactual_seconds(seconds, share, 4),
                        setup_reserved_bytes=base.memory.setup.reserved_bytes if base.memory else None,
                        measurement_reserved_bytes=base_peaks.reserved_bytes if base_peaks else None,
                        measurement_allocated_bytes=base_peaks.allocated_bytes if base_peaks else None,
                        original_measurement_reserved_bytes=original_peaks.reserved_bytes if original_peaks else None,
                        gpu_name=base.hardware.gpu_name,
                        gpu_memory_bytes=base.hardware.gpu_memory_bytes,
                        throughput_campaign=pair.throughput.name,
                        optimizer_campaign=pair.optimizer.name,
                        **energy.point_energy(base, P, carbon_intensity),
                        precision=base.recipe.training.precision,
                        optimizer=base.recipe.optimizer.name,
                    )
                )
    return points


def fastest(points: list[Point], *, original: bool = False) -> tuple[Point | None, bool]:
    """The fastest stable point (only stable points compete); the fastest of all if none is."""
    if not points:
        return None, False
    key = (lambda p: p.original_tokens_per_second) if original else (lambda p: p.tokens_per_second)
    stable = [p for p in points if not (p.original_unstable if original else p.unstable)]
    return (max(stable, key=key), True) if stable else (max(points, key=key), False)


def choose_tokens_per_update(points: list[Point], curves: list[str]) -> int:
    """The largest B·L available on every curve; else the one on the most curves."""
    on: dict[int, set[str]] = {}
    for p in points:
        on.setdefault(p.tokens_per_update, set()).add(p.curve)
    if not on:
        return 0
    return max(on, key=lambda t: (len(on[t]), t))


def recommendations(pairs: list[Pair]) -> dict[str, Recommendation]:
    """Each curve's recommendation from the primary (baseline) rates, against the noise
    threshold of every point the report draws."""
    baselines = [
        (name, b, pair.points[name][b].attempt.measured_baseline)
        for pair in pairs
        for name, c in pair.curves.items()
        for b in c.fitting
    ]
    rated = [point_rate(name, b, base) for name, b, base in baselines]
    return campaign_recommendations(
        [r for r in rated if r is not None],
        first_oom={name: c.first_oom for pair in pairs for name, c in pair.curves.items()},
        gpu_memory_bytes=gpu_memory_bytes(base for _, _, base in baselines),
    )


def project(
    pairs: list[Pair], tokens_per_update: int | None = None, *, carbon_intensity: float | None = None
) -> Projection:
    """`carbon_intensity`: the user's grid figure (gCO2e/kWh) for the emissions of the projected
    energy; without it there are none."""
    points = join_points(pairs, carbon_intensity)
    recommended = recommendations(pairs)
    models: list[str] = []
    contexts: list[int] = []
    curves: list[CurveRow] = []
    for pair in pairs:
        for m in pair.throughput.manifest.models:
            if m not in models:
                models.append(m)
        contexts.extend(pair.throughput.manifest.contexts)
        for name, curve in pair.curves.items():
            mine = [p for p in points if p.curve == name]
            best, stable = fastest(mine)
            orig, _ = fastest(mine, original=True)
            parameters = mine[0].parameters if mine else 0
            curves.append(
                CurveRow(
                    model=curve.model,
                    context=curve.context,
                    parameters=parameters,
                    fitting_batches=list(curve.fitting),
                    largest_fitting_batch=curve.largest_fitting,
                    first_oom_batch=curve.first_oom,
                    capped=curve.capped,
                    best=best,
                    best_is_stable=stable,
                    original_best_batch=orig.batch if orig else None,
                    closed=f"at batch {curve.closed.batch_size}: {curve.closed.reason}" if curve.closed else "",
                    recommendation=recommended.get(name),
                )
            )
    contexts.sort()
    order = {m: i for i, m in enumerate(models)}
    curves.sort(key=lambda c: (order[c.model], c.context))
    points.sort(key=lambda p: (order[p.model], p.context, p.batch))
    tpu = tokens_per_update or choose_tokens_per_update(points, [c.curve for c in curves])
    comparison = {(p.model, p.context): p for p in points if p.tokens_per_update == tpu}
    return Projection(
        points=points,
        curves=curves,
        models=models,
        contexts=contexts,
        tokens_per_update=tpu,
        comparison=comparison,
        carbon_intensity=carbon_intensity,
    )


def median_share(points: list[Point]) -> float:
    return statistics.median(p.optimizer_share for p in points) if points else 0.0
