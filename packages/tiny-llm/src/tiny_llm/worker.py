"""One throughput point: build, measure, and always write the result.

Outcomes and exit codes (`throughput_schema.outcomes.EXIT_CODES`):

| outcome         | exit | when |
|-----------------|------|------|
| `ok`            | 0    | measured; the result may still be flagged unstable |
| `crashed`       | 1    | any other exception (including an optimizer-counter mismatch, and a built model whose parameter count is not the recipe's: nothing is measured) |
| (usage)         | 2    | bad command line or recipe; one line on stderr, no result file |
| `cuda_oom`      | 3    | `torch.cuda.OutOfMemoryError` anywhere; `phase` says where |
| `compile_error` | 4    | a torch._dynamo / inductor / triton failure (not an OOM) |
| `nonfinite`     | 5    | the state is not finite after warm-up or after a window |
| `refused`       | 11   | this node cannot run the asked precision (FP8 without torchao or FP8 matrix units): nothing measured |
| `storage_full`  | 10   | the result could not be written (filesystem full or over its quota): kept on the node instead, no result file |

Phases: `setup` (model, arena, inputs), `compile` (the first eager update, which
compiles forward and backward), `capture` (the CUDA graph), `warmup` (warm-up and
calibration updates), `measurement` (the windows). The result JSON is written
atomically in every case, with whatever was measured before a failure.

With `--optimizer-timing`, a measured result's raw burst samples are also written,
atomically and before the result, beside it (`throughput_schema.layout.bursts_path`):
`bursts.jsonl` when the output is named `result.json` (the campaign layout), else
`<output stem>.bursts.jsonl`; one `BurstSample` JSON object a line, equal to the
result's `optimizer_timing.bursts`. A failed run writes no bursts file.

Energy (`tiny_llm.energy_meter`, `--energy auto`): the GPU's counter is read around setup
(compile and capture) and around every window (`tiny_llm.protocol`); a measured result
carries `energy` (`throughput_schema.energy.summarize`: median joules per token, mean power,
power limit, setup energy, the counter's source). Without a counter (the CPU, NVML missing,
a driver without it, `--energy off`, a read that failed) `energy` is None and
`energy_unavailable` says why; so too for a failed point, whose windows keep their readings.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import tiny_llm
from throughput_schema import (
    EXIT_CODES,
    CompileError,
    Crashed,
    CudaOom,
    MemoryPeaks,
    MemoryReport,
    NonFinite,
    Ok,
    Protocol,
    Recipe,
    Refused,
    Throughput,
    WorkerIdentity,
    WorkerResult,
    outcome_kind,
    write_atomic,
)
from throughput_schema.muon import ownership
from throughput_schema.node_local import not_written
from throughput_schema.recipe import flops_per_token, parameter_count
from throughput_schema.results import JOB_STARTED_AT_ENV
from tiny_llm import hardware, stats
from tiny_llm.compile_cache import CacheFolders, CompileCacheUse
from tiny_llm.energy_meter import open_meter
from tiny_llm.fp8 import Fp8Unavailable
from tiny_llm.kernels import Kernels
from tiny_llm.protocol import Measurement, NonFiniteState, measure, protocol_record
from tiny_llm.setup_clock import SetupClock, startup_seconds
from tiny_llm.summary import MFU_FORMULA, energy_summary, optimizer_summary, throughput_summary, write_bursts  # noqa: F401
from tiny_llm.update import ParameterCountMismatch


@dataclass
class WorkerOptions:
    protocol: Protocol = Protocol()  # the schema's record: warm-up, windows, CV threshold, ...
    optimizer_timing: bool = False
    device: str = "auto"  # auto | cuda | cpu
    compile_mode: str | None = None
    kernels: Kernels = Kernels()  # speed variants; recorded in the result, "auto" resolved
    energy: str = "auto"  # auto: read the GPU's energy counter where there is one | off
    compile_cache: CacheFolders = CacheFolders()  # where compiled artifacts are loaded and saved
    compile_model: bool | None = None  # None: compiled on CUDA only (True on the CPU: tests)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class TorchRunner:
    """The protocol's view of a built update: replays, syncs, checks, event reads."""

    def __init__(self, built) -> None:
        self.built, self.cuda = built, built.device.type == "cuda"
        self._run = built.run

    def run(self, updates: int) -> None:
        run = self._run
        for _ in range(updates):
            run()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def check(self) -> tuple[bool, int]:
        opt = self.built.optimizer
        return bool(opt.state_is_finite().item()), int(opt.updates.item())

    def read_events(self) -> tuple[float, float]:
        start, before_step, after_step = self.built.update.events
        return start.elapsed_time(after_step), before_step.elapsed_time(after_step)


def _peaks(device: torch.device) -> MemoryPeaks:
    return MemoryPeaks(
        allocated_bytes=torch.cuda.max_memory_allocated(device), reserved_bytes=torch.cuda.max_memory_reserved(device)
    )


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


MESSAGE_LIMIT = 500


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0] if text else ''}"
    if len(line) <= MESSAGE_LIMIT:
        return line
    # Whole sentences: PyTorch's OOM text puts the figures first and advice last, and a
    # cut mid-word reads as a corrupted record.
    end = line.rfind(". ", 0, MESSAGE_LIMIT)
    return line[: end + 1] if end > 0 else line[: MESSAGE_LIMIT - 3] + "..."


def classify(exc: BaseException, phase: str):
    """The outcome for an exception raised in `phase` (OOM wins over everything it is wrapped in)."""
    chain = list(_chain(exc))
    if isinstance(exc, Fp8Unavailable):  # the node's limit, not the point's: never a boundary
        return Refused(phase=phase, message=str(exc), reason=exc.cause, fix=exc.fix)
    for e in chain:
        if isinstance(e, torch.cuda.OutOfMemoryError) or "CUDA out of memory" in str(e):
            return CudaOom(phase=phase, message=_one_line(e))
    for e in chain:
        if isinstance(e, NonFiniteState):
            return NonFinite(phase=e.phase, window=e.window, message=str(e))
    for e in chain:
        module = type(e).__module__ or ""
        if module.startswith(("torch._dynamo", "torch._inductor", "triton")):
            return CompileError(phase=phase, message=_one_line(exc))
    return Crashed(phase=phase, message=_one_line(exc), exit_code=EXIT_CODES["crashed"])


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class _Point:
    """What one point's run has produced so far: a failure keeps whatever came before it."""

    parameters: int  # the recipe's count until a model is built (or where the built one differs)
    energy_unavailable: str
    phase: str = "setup"
    built: Any = None
    setup_seconds: float | None = None
    setup_clock: SetupClock = field(default_factory=SetupClock)
    setup_phases: dict[str, float] = field(default_factory=dict)
    startup_seconds: float | None = None
    setup_peaks: MemoryPeaks | None = None
    memory: MemoryReport | None = None
    throughput: Throughput | None = None
    timing: Any = None
    energy: Any = None
    outcome: Any = None
    energy_source: Any = None
    power_limit: float | None = None
    cache: CompileCacheUse | None = None

    def on_phase(self, name: str) -> None:
        self.phase = name
        self.setup_clock.mark(name)


def run_worker(recipe: Recipe, output: Path, options: WorkerOptions, *, open_energy_meter=None) -> WorkerResult:
    """Measure one point and write its result to `output`; never raises for measurement failures.

    `open_energy_meter(device, mode) -> (meter, reason)` replaces `open_meter` (a check that
    logs the reads, a test's planned meter)."""
    started_at = _now()
    device = resolve_device(options.device)
    hw = hardware.collect(device)
    try:
        meter, no_energy = (open_energy_meter or open_meter)(device, options.energy)
    except Exception as exc:  # noqa: BLE001 - no counter is a result without energy, not a failed point
        meter, no_energy = None, f"the energy counter could not be opened: {_one_line(exc)}"
    measurement = Measurement(tokens_per_update=recipe.training.batch_tokens, meter=meter, energy_unavailable=no_energy)
    point = _Point(parameters=parameter_count(recipe.model), energy_unavailable=no_energy)
    if meter is not None:  # asked once, before any read can drop the meter
        point.energy_source, point.power_limit = meter.source(), meter.power_limit_watts()
    try:
        _measure(recipe, options, device, hw, measurement, point)
        point.outcome = Ok()
    except BaseException as exc:  # noqa: BLE001 - every failure must still produce a result file
        if isinstance(exc, KeyboardInterrupt):
            raise
        point.outcome = classify(exc, point.phase)
        if isinstance(exc, (ParameterCountMismatch, Fp8Unavailable)):
            point.parameters = getattr(exc, "built", point.parameters)
            print(f"tiny_llm: {exc}", file=sys.stderr)  # a refusal: one line, no traceback
        elif outcome_kind(point.outcome) in ("crashed", "compile_error"):
            traceback.print_exc(file=sys.stderr)
        point.memory = _memory_after_failure(device, hw, point.setup_peaks, point.memory)
    result = _result(recipe, options, device, hw, measurement, point, started_at)
    try:
        if point.timing is not None:
            # Raw burst samples beside the result (bursts.jsonl for result.json), written
            # before it, so a result with optimizer timing always has its bursts file.
            write_bursts(output, point.timing)
        write_atomic(output, result)
    except OSError as exc:
        raise not_written(exc, output, result) from None  # a full disk: kept on the node
    return result


def _measure(
    recipe: Recipe, options: WorkerOptions, device: torch.device, hw, measurement: Measurement, point: _Point
) -> None:
    """Build the update (the setup, its energy and memory), then run the protocol on it."""
    from tiny_llm.update import build

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    point.startup_seconds = startup_seconds()
    # The counter is read right beside the clock so that setup's energy and its seconds
    # bracket the same interval.
    setup_start_mj = measurement.read_energy("before setup")
    point.cache = cache = CompileCacheUse(options.compile_cache)
    t0 = time.perf_counter()
    point.built = built = build(
        recipe,
        device,
        timing_events=options.optimizer_timing,
        compile_model=options.compile_model,
        compile_mode=options.compile_mode,
        kernels=options.kernels,
        on_phase=point.on_phase,
        before_compile=cache.hook(recipe, hw, device),
    )
    point.parameters = built.parameters
    if cuda:
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    setup_mj = (setup_start_mj, measurement.read_energy("after setup"))
    point.setup_seconds = t1 - t0
    point.setup_phases = point.setup_clock.phases(t0, t1)
    cache.finish()
    cache.save()  # after the setup's clock: saving is not part of setting the update up
    if cuda:
        point.setup_peaks = _peaks(device)
        point.memory = MemoryReport(setup=point.setup_peaks, device_total_bytes=hw.gpu_memory_bytes)
        torch.cuda.reset_peak_memory_stats(device)

    opts = options.protocol
    measure(
        TorchRunner(built),
        opts,
        measurement,
        updates_before=built.setup_updates,
        optimizer_timing=options.optimizer_timing,
        on_phase=point.on_phase,
    )
    if cuda and point.setup_peaks is not None:  # read at the end of setup on CUDA
        point.memory = MemoryReport(
            setup=point.setup_peaks, measurement=_peaks(device), device_total_bytes=hw.gpu_memory_bytes
        )
    point.throughput = summarise(measurement, recipe, opts, hw, flops_per_token(recipe.model))
    if options.optimizer_timing:
        point.timing = optimizer_summary(measurement, opts, separate_step_ms=_separate_step_ms(built))
    point.energy, point.energy_unavailable = energy_summary(
        measurement,
        point.energy_source,
        optimizer_timing=options.optimizer_timing,
        power_limit_watts=point.power_limit,
        setup_mj=setup_mj,
        setup_seconds=point.setup_seconds,
    )


def _result(
    recipe: Recipe,
    options: WorkerOptions,
    device: torch.device,
    hw,
    measurement: Measurement,
    point: _Point,
    started_at: str,
) -> WorkerResult:
    kind = outcome_kind(point.outcome)
    energy, energy_unavailable = point.energy, point.energy_unavailable
    if kind != "ok":
        energy = None
        energy_unavailable = measurement.energy_unavailable or f"the point was not measured to the end ({kind})"
    built = point.built
    return WorkerResult(
        outcome=point.outcome,
        recipe=recipe,
        parameters=point.parameters,
        mode="optimizer-timing" if options.optimizer_timing else "throughput",
        backend=built.backend if built is not None else ("cuda-graph" if device.type == "cuda" else "cpu-eager"),
        protocol=protocol_record(recipe, options.protocol),
        setup_seconds=point.setup_seconds,
        setup_phases=point.setup_phases,
        startup_seconds=point.startup_seconds,
        calibration=measurement.calibration,
        windows=list(measurement.windows),
        throughput=point.throughput,
        optimizer_timing=point.timing,
        memory=point.memory,
        hardware=hw,
        started_at=started_at,
        finished_at=_now(),
        job_started_at=os.environ.get(JOB_STARTED_AT_ENV, ""),
        exit_code=EXIT_CODES[kind],
        setup_updates=built.setup_updates if built is not None else 0,
        kernels=_kernels_record(options, built, device, recipe.model),
        worker=WorkerIdentity(module=tiny_llm.__name__, version=tiny_llm.__version__),
        energy=energy,
        energy_unavailable=energy_unavailable,
        fp8=built.fp8 if built is not None else None,
        optimizer_owned=ownership(recipe.optimizer, recipe.model),
        compile_cache=point.cache.record() if point.cache is not None else None,
    )


def _memory_after_failure(device: torch.device, hw, setup_peaks, memory: MemoryReport | None) -> MemoryReport | None:
    """The memory a failed point reports: the peaks read so far, where the device still answers."""
    if device.type != "cuda":
        return memory
    try:
        if setup_peaks is not None:
            return MemoryReport(setup=setup_peaks, measurement=_peaks(device), device_total_bytes=hw.gpu_memory_bytes)
        if memory is None:
            return MemoryReport(setup=_peaks(device), device_total_bytes=hw.gpu_memory_bytes)
    except Exception:  # noqa: BLE001 - the device may be unusable after the failure
        pass
    return memory


def _kernels_record(options: WorkerOptions, built, device: torch.device, cfg) -> dict[str, str]:
    """`Kernels.record()` with the "auto" choices resolved: the kernels that ran (or, where the
    build failed, that "auto" picks for this model on this device), never "auto"."""
    from dataclasses import replace

    from tiny_llm.kernel_registry import resolve_kernels
    from tiny_llm.model import window_handling

    if built is not None:  # compile_mode included: build() merged options.compile_mode
        ran = built.ran()
    else:
        kernels = options.kernels
        if options.compile_mode is not None:
            kernels = replace(kernels, compile_mode=options.compile_mode)
        ran = resolve_kernels(kernels, device, cfg)
    window = window_handling(ran.attention, cfg)
    return ran.record() | ({"window": window} if window else {})


def summarise(m: Measurement, recipe: Recipe, opts: Protocol, hw, fpt: int) -> Throughput:
    return throughput_summary(m, recipe, opts, hw, fpt)


def _separate_step_ms(built) -> float | None:
    """ArenaAdamW.step captured alone and replayed (after all windows, so the result is unaffected)."""
    if built.device.type != "cuda":
        return None
    from tiny_llm.graph import capture, time_replays

    graph = capture(built.optimizer.step)
    return stats.median(time_replays(graph.replay, replays=20, rounds=5))
