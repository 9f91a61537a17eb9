"""The result's derived figures from a finished `Measurement`, torch-free.

`throughput_summary`: median window rate, sample CV, stability flag, update ms, FLOPs per
token and MFU (with the peak from `throughput_schema.gpus.PEAK_BF16`). `optimizer_summary`: each
window's optimizer and graph ms (burst samples weighted by burst update count), their
median, CV, and the optimizer's share of instrumented wall time and of graph time.
`write_bursts` keeps the raw burst samples beside the result (`throughput_schema.layout.bursts_path`).
`energy_summary`: the result's energy from the windows' counter readings
(`throughput_schema.energy.summarize`), or None and the reason there is none.

Kept apart from `worker` (which needs torch) so that test doubles of the worker can
produce records with exactly the real worker's arithmetic.
"""

from __future__ import annotations

from pathlib import Path

from throughput_schema import Hardware, OptimizerTiming, Protocol, Recipe, Throughput, write_atomic
from throughput_schema.energy import Energy, EnergySource, summarize
from throughput_schema.layout import bursts_path, encode_bursts
from throughput_schema.precision import is_fp8, peak_fp8_flops
from throughput_schema.recipe import flops_per_token
from tiny_llm import hardware, stats
from tiny_llm.protocol import Measurement

# throughput_schema.recipe.flops_per_token: an untied input embedding is a lookup, not a matmul,
# and attention's width is n_heads*head_dim (d_model only where they agree).
MFU_FORMULA = (
    "(6*(P - untied input embedding) + 12*layers*n_heads*head_dim*context) * tokens_per_second / peak_bf16_flops"
)


def throughput_summary(
    m: Measurement, recipe: Recipe, opts: Protocol, hw: Hardware, fpt: int | None = None
) -> Throughput:
    fpt = flops_per_token(recipe.model) if fpt is None else fpt
    rates = m.rates()
    rate = stats.median(rates)
    cv = stats.sample_cv(rates)
    peak = hardware.peak_bf16_flops(hw.gpu_name, hw.gpu_memory_bytes) if hw.gpu_name else None
    return Throughput(
        tokens_per_second=rate,
        sequences_per_second=rate / recipe.model.context_length,
        window_tokens_per_second=rates,
        cv=cv,
        unstable=stats.needs_more_windows(cv, opts.cv_threshold),
        update_ms=1000.0 * recipe.training.batch_tokens / rate,
        flops_per_token=float(fpt),
        mfu=stats.mfu(rate, fpt, peak),
        peak_flops=peak,
        mfu_formula=MFU_FORMULA
        + (f", peak {peak:.4g} FLOP/s ({hw.gpu_name})" if peak else ", peak unknown")
        + fp8_peak_note(recipe.training.precision, hw),
    )


def fp8_peak_note(precision: str, hw: Hardware) -> str:
    """What an FP8 point's MFU is (the one definition, BF16-equivalent), with the FP8 peak beside it."""
    if not is_fp8(precision):
        return ""
    peak = peak_fp8_flops(hw.gpu_name, hw.gpu_memory_bytes)
    beside = f"; the dense FP8 peak is {peak:.4g} FLOP/s" if peak else ""
    return f"; BF16-equivalent at {precision}{beside}"


def optimizer_summary(m: Measurement, opts: Protocol, *, separate_step_ms: float | None = None) -> OptimizerTiming:
    window_opt = m.window_optimizer_ms()
    window_graph = m.window_graph_ms()
    wall_ms_per_update = [1000.0 * w.seconds / w.updates for w in m.windows]
    optimizer_ms = stats.median(window_opt)
    cv = stats.sample_cv(window_opt)
    return OptimizerTiming(
        bursts=list(m.bursts),
        window_optimizer_ms=window_opt,
        window_graph_ms=window_graph,
        optimizer_ms=optimizer_ms,
        optimizer_cv=cv,
        share_of_wall=min(1.0, optimizer_ms / stats.median(wall_ms_per_update)),
        share_of_graph=min(1.0, optimizer_ms / stats.median(window_graph)),
        unstable=stats.needs_more_windows(cv, opts.cv_threshold),
        separate_step_ms=separate_step_ms,
    )


def write_bursts(output: str | Path, timing: OptimizerTiming) -> Path:
    """The raw burst samples, one JSON object a line, written atomically beside `output`."""
    return write_atomic(bursts_path(output), encode_bursts(timing.bursts))


def energy_summary(
    m: Measurement,
    source: EnergySource | None,
    *,
    optimizer_timing: bool,
    power_limit_watts: float | None = None,
    setup_mj: tuple[int | None, int | None] = (None, None),
    setup_seconds: float | None = None,
) -> tuple[Energy | None, str]:
    """(energy, "") where every window has counter readings, else (None, the reason).

    `setup_mj` is the counter read before and after setup (compile and capture);
    the setup energy is None where either read is missing."""
    windows = [w.energy for w in m.windows]
    if m.energy_unavailable or source is None:
        return None, m.energy_unavailable or "no energy counter"
    if not windows or any(w is None for w in windows):
        return None, "no window has energy counter readings"
    start, end = setup_mj
    setup_joules = (end - start) / 1000.0 if start is not None and end is not None else None
    energy = summarize(
        [w for w in windows if w is not None],
        source,
        power_limit_watts=power_limit_watts,
        setup_joules=setup_joules,
        setup_seconds=setup_seconds if setup_joules is not None else None,
        interval="span" if optimizer_timing else "window",
    )
    return energy, ""
