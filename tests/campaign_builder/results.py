"""Worker results whose derived figures agree with their raw windows and bursts, from
small fixed presets; the arithmetic uses the standard library's `statistics`."""

from __future__ import annotations

import statistics

from throughput_schema import (
    BurstSample,
    Calibration,
    ModelConfig,
    Ok,
    OptimizerTiming,
    Protocol,
    Recipe,
    Throughput,
    TrainingConfig,
    Window,
    WorkerResult,
)
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.recipe import parameter_count
from throughput_schema.records import WorkerIdentity

PRESETS = {
    "20m": ModelConfig(n_layers=8, d_model=320, n_heads=5, ffn_dim=832, context_length=512),
    "90m": ModelConfig(n_layers=12, d_model=640, n_heads=10, ffn_dim=1728, context_length=512),
}


def preset(model: str) -> Recipe:
    return Recipe(name=model, model=PRESETS[model], training=TrainingConfig(micro_batch_size=8, batch_tokens=4096))


def window_seconds(batch: int, n: int, *, jitter: float) -> list[float]:
    base = 10.0 + 0.001 * batch
    pattern = [0.0, 1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 0.75, -0.75, 0.1]
    return [base * (1 + jitter * pattern[i % len(pattern)]) for i in range(n)]


def throughput_result(
    recipe: Recipe,
    protocol: Protocol,
    batch: int,
    context: int,
    *,
    unstable: bool = False,
    mode: str = "throughput",
    slower: float = 1.0,
) -> WorkerResult:
    updates = 40
    jitter = 0.2 if unstable else 0.002
    n = protocol.windows + (protocol.extra_windows if unstable else 0)
    seconds = [s * slower for s in window_seconds(batch, n, jitter=jitter)]
    setup_updates = 3
    start = setup_updates + protocol.warmup + protocol.calibration_updates
    windows = [
        Window(updates=updates, seconds=s, counter_after=start + updates * (i + 1)) for i, s in enumerate(seconds)
    ]
    return WorkerResult(
        worker=WorkerIdentity(module=PRODUCTION_WORKER),
        outcome=Ok(),
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode=mode,
        protocol=protocol,
        setup_seconds=30.0,
        setup_phases={"build": 4.0, "trace": 6.0, "compile": 14.0, "first_run": 4.5, "capture": 1.5},
        startup_seconds=8.0,
        setup_updates=setup_updates,
        calibration=Calibration(updates=protocol.calibration_updates, seconds=1.25, updates_per_window=updates),
        windows=windows,
        throughput=throughput_of(windows, batch, context, protocol),
    )


def throughput_of(windows: list[Window], batch: int, context: int, protocol: Protocol) -> Throughput:
    """What a worker reports from its windows: the median window rate, its CV, the flag."""
    tokens = batch * context
    rates = [w.updates * tokens / w.seconds for w in windows]
    tps = statistics.median(rates)
    cv = statistics.stdev(rates) / statistics.fmean(rates)
    return Throughput(
        tokens_per_second=tps,
        sequences_per_second=tps / context,
        window_tokens_per_second=rates,
        cv=cv,
        unstable=cv > protocol.cv_threshold,
        update_ms=1000.0 * tokens / tps,
    )


def failed_result(recipe: Recipe, protocol: Protocol, outcome, mode: str = "throughput") -> WorkerResult:
    return WorkerResult(
        worker=WorkerIdentity(module=PRODUCTION_WORKER),
        outcome=outcome,
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode=mode,
        protocol=protocol,
        exit_code=3,
    )


def bursts_for(
    result: WorkerResult, *, size: int = 7, optimizer_ms: float = 2.0, graph_ms: float = 20.0
) -> list[BurstSample]:
    out = []
    for i, w in enumerate(result.windows):
        left, j = w.updates, 0
        while left:
            n = min(size, left)
            left -= n
            out.append(
                BurstSample(
                    window=i,
                    updates=n,
                    wall_seconds=n * w.seconds / w.updates,
                    graph_ms=graph_ms * (1 + 0.01 * ((i + j) % 3)),
                    optimizer_ms=optimizer_ms * (1 + 0.02 * ((i * 2 + j) % 4)),
                )
            )
            j += 1
    return out


def optimizer_timing(
    result: WorkerResult, bursts: list[BurstSample], batch: int, context: int, protocol: Protocol
) -> OptimizerTiming:
    return timing_of(result.windows, bursts, protocol)


def timing_of(windows: list[Window], bursts: list[BurstSample], protocol: Protocol) -> OptimizerTiming:
    """What an instrumented worker reports from its bursts: update-weighted window means."""

    def per_window(attr: str) -> list[float]:
        out = []
        for i in range(len(windows)):
            mine = [b for b in bursts if b.window == i]
            out.append(sum(getattr(b, attr) * b.updates for b in mine) / sum(b.updates for b in mine))
        return out

    opt, graph = per_window("optimizer_ms"), per_window("graph_ms")
    opt_ms = statistics.median(opt)
    cv = statistics.stdev(opt) / statistics.fmean(opt)
    wall_ms = statistics.median(1000.0 * w.seconds / w.updates for w in windows)
    return OptimizerTiming(
        bursts=bursts,
        window_optimizer_ms=opt,
        window_graph_ms=graph,
        optimizer_ms=opt_ms,
        optimizer_cv=cv,
        share_of_wall=opt_ms / wall_ms,
        share_of_graph=opt_ms / statistics.median(graph),
        unstable=cv > protocol.cv_threshold,
    )
