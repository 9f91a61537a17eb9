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
from dataclasses import dataclass
from pathlib import Path

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
    Throughput,
    WorkerIdentity,
    WorkerResult,
    outcome_kind,
    write_atomic,
)
from throughput_schema.node_local import not_written
from throughput_schema.recipe import flops_per_token, parameter_count
from throughput_schema.results import JOB_STARTED_AT_ENV
from tiny_llm import hardware, stats
from tiny_llm.energy_meter import open_meter
from tiny_llm.kernels import Kernels
from tiny_llm.protocol import Measurement, NonFiniteState, measure, protocol_record
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


def run_worker(
    recipe: Recipe, output: Path, options: WorkerOptions, *, log=print, open_energy_meter=None
) -> WorkerResult:
    """Measure one point and write its result to `output`; never raises for measurement failures.

    `open_energy_meter(device, mode) -> (meter, reason)` replaces `open_meter` (a check that
    logs the reads, a test's planned meter)."""
    started_at = _now()
    opts = options.protocol
    device = resolve_device(options.device)
    cuda = device.type == "cuda"
    tokens_per_update = recipe.training.batch_tokens
    fpt = flops_per_token(recipe.model)
    phase = "setup"

    def on_phase(name: str) -> None:
        nonlocal phase
        phase = name

    protocol = protocol_record(recipe, opts)
    hw = hardware.collect(device)
    try:
        meter, no_energy = (open_energy_meter or open_meter)(device, options.energy)
    except Exception as exc:  # noqa: BLE001 - no counter is a result without energy, not a failed point
        meter, no_energy = None, f"the energy counter could not be opened: {_one_line(exc)}"
    source = meter.source() if meter is not None else None
    power_limit = meter.power_limit_watts() if meter is not None else None
    measurement = Measurement(tokens_per_update=tokens_per_update, meter=meter, energy_unavailable=no_energy)
    setup_mj: tuple[int | None, int | None] = (None, None)
    energy, energy_unavailable = None, no_energy
    setup_seconds = None
    memory = None
    throughput = None
    timing = None
    built = None
    setup_peaks = None
    outcome = None
    # The parameters of the model built (the recipe's count until one is built, or where it differs).
    parameters = parameter_count(recipe.model)
    try:
        from tiny_llm.update import build

        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        setup_start_mj = measurement.read_energy("before setup")
        t0 = time.perf_counter()
        built = build(
            recipe,
            device,
            timing_events=options.optimizer_timing,
            compile_mode=options.compile_mode,
            kernels=options.kernels,
            on_phase=on_phase,
        )
        parameters = built.parameters
        if cuda:
            torch.cuda.synchronize()
        setup_seconds = time.perf_counter() - t0
        setup_mj = (setup_start_mj, measurement.read_energy("after setup"))
        if cuda:
            setup_peaks = _peaks(device)
            memory = MemoryReport(setup=setup_peaks, device_total_bytes=hw.gpu_memory_bytes)
            torch.cuda.reset_peak_memory_stats(device)

        measure(
            TorchRunner(built),
            opts,
            measurement,
            updates_before=built.setup_updates,
            optimizer_timing=options.optimizer_timing,
            on_phase=on_phase,
        )
        if cuda and setup_peaks is not None:  # read at the end of setup on CUDA
            memory = MemoryReport(setup=setup_peaks, measurement=_peaks(device), device_total_bytes=hw.gpu_memory_bytes)
        throughput = summarise(measurement, recipe, opts, hw, fpt)
        if options.optimizer_timing:
            timing = optimizer_summary(measurement, opts, separate_step_ms=_separate_step_ms(built))
        energy, energy_unavailable = energy_summary(
            measurement,
            source,
            optimizer_timing=options.optimizer_timing,
            power_limit_watts=power_limit,
            setup_mj=setup_mj,
            setup_seconds=setup_seconds,
        )
        outcome = Ok()
    except BaseException as exc:  # noqa: BLE001 - every failure must still produce a result file
        if isinstance(exc, KeyboardInterrupt):
            raise
        outcome = classify(exc, phase)
        if isinstance(exc, ParameterCountMismatch):
            parameters = exc.built
            print(f"tiny_llm: {exc}", file=sys.stderr)  # a refusal: one line, no traceback
        elif outcome_kind(outcome) in ("crashed", "compile_error"):
            traceback.print_exc(file=sys.stderr)
        memory = _memory_after_failure(device, hw, setup_peaks, memory)
    kind = outcome_kind(outcome)
    if kind != "ok":
        energy = None
        energy_unavailable = measurement.energy_unavailable or f"the point was not measured to the end ({kind})"
    result = WorkerResult(
        outcome=outcome,
        recipe=recipe,
        parameters=parameters,
        mode="optimizer-timing" if options.optimizer_timing else "throughput",
        backend=built.backend if built is not None else ("cuda-graph" if cuda else "cpu-eager"),
        protocol=protocol,
        setup_seconds=setup_seconds,
        calibration=measurement.calibration,
        windows=list(measurement.windows),
        throughput=throughput,
        optimizer_timing=timing,
        memory=memory,
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
    )
    try:
        if timing is not None:
            # Raw burst samples beside the result (bursts.jsonl for result.json), written
            # before it, so a result with optimizer timing always has its bursts file.
            write_bursts(output, timing)
        write_atomic(output, result)
    except OSError as exc:
        raise not_written(exc, output, result) from None  # a full disk: kept on the node
    return result


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

    if built is not None:  # compile_mode included: build() merged options.compile_mode
        return built.ran().record()
    kernels = options.kernels
    if options.compile_mode is not None:
        kernels = replace(kernels, compile_mode=options.compile_mode)
    from tiny_llm.kernel_registry import resolve_kernels

    return resolve_kernels(kernels, device, cfg).record()


def summarise(m: Measurement, recipe: Recipe, opts: Protocol, hw, fpt: int) -> Throughput:
    return throughput_summary(m, recipe, opts, hw, fpt)


def _separate_step_ms(built) -> float | None:
    """ArenaAdamW.step captured alone and replayed (after all windows, so the result is unaffected)."""
    if built.device.type != "cuda":
        return None
    from tiny_llm.graph import capture, time_replays

    graph = capture(built.optimizer.step)
    return stats.median(time_replays(graph.replay, replays=20, rounds=5))
