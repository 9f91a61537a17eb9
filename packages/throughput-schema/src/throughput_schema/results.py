"""What a worker writes: its result, the measured windows, memory, hardware and bursts."""

from __future__ import annotations

from typing import Literal

import msgspec

from throughput_schema.compile_cache import CompileCache
from throughput_schema.configs import (
    Fraction,
    NonNegFloat,
    NonNegInt,
    PositiveFloat,
    PositiveInt,
    Protocol,
    Recipe,
    _Record,
)
from throughput_schema.energy import Energy, WindowEnergy
from throughput_schema.outcomes import Outcome


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """One synchronised wall-clock window: `updates` complete updates in `seconds`."""

    updates: PositiveInt
    seconds: PositiveFloat
    # The optimizer's update counter read after the window (exact-count check).
    counter_after: NonNegInt = 0
    # The GPU's energy counter around the window; None where there is no counter.
    energy: WindowEnergy | None = None


class Calibration(msgspec.Struct, frozen=True, kw_only=True):
    updates: PositiveInt
    seconds: PositiveFloat
    updates_per_window: PositiveInt


class MemoryPeaks(msgspec.Struct, frozen=True, kw_only=True):
    allocated_bytes: NonNegInt
    reserved_bytes: NonNegInt


class MemoryReport(msgspec.Struct, frozen=True, kw_only=True):
    setup: MemoryPeaks
    measurement: MemoryPeaks | None = None
    device_total_bytes: NonNegInt = 0


class Fp8Linears(msgspec.Struct, frozen=True, kw_only=True):
    """Which of the model's linears trained in FP8 (torchao's `recipe`), and why each other
    stayed BF16 (`throughput_schema.precision.fp8_kept_reason`), by module name."""

    recipe: str
    converted: list[str] = []
    kept: dict[str, str] = {}


class Hardware(msgspec.Struct, frozen=True, kw_only=True):
    gpu_name: str = ""
    gpu_memory_bytes: int = 0
    gpu_count: int = 0
    # The GPU that ran the point, as nvidia-smi names it ("GPU-<uuid>"): hostnames of
    # lent or cloud machines repeat, and run-to-run spread is only explained per device.
    gpu_uuid: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    python: str = ""
    hostname: str = ""
    cpu: str = ""
    cpu_count: int = 0
    platform: str = ""


class WorkerIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Which worker a result came from: the module run as `python -m <module>` and its
    version. Only the production worker's results are measurements (`provenance`)."""

    module: str
    version: str = ""
    # A worker that ended without a result has one written for it, by the watchdog on
    # the node or by the controller from the final accounting. "upgrade": the result named
    # no worker, and `throughput-schema upgrade` could not tell from it who wrote it
    # (`upgrade_results.written_by`); the manifest's worker is named.
    written_by: Literal["worker", "watchdog", "controller", "upgrade"] = "worker"


class Throughput(msgspec.Struct, frozen=True, kw_only=True):
    """Derived figures; the audit recomputes all of them from `WorkerResult.windows`."""

    tokens_per_second: PositiveFloat
    sequences_per_second: PositiveFloat
    window_tokens_per_second: list[float]
    cv: NonNegFloat
    unstable: bool
    update_ms: PositiveFloat
    flops_per_token: float = 0.0
    mfu: float | None = None
    peak_flops: float | None = None
    mfu_formula: str = ""


class BurstSample(msgspec.Struct, frozen=True, kw_only=True):
    """One synchronised burst of graph replays; events describe its last replay."""

    window: NonNegInt
    updates: PositiveInt
    wall_seconds: PositiveFloat
    graph_ms: NonNegFloat
    optimizer_ms: NonNegFloat


class OptimizerTiming(msgspec.Struct, frozen=True, kw_only=True):
    bursts: list[BurstSample]
    window_optimizer_ms: list[float]
    window_graph_ms: list[float]
    optimizer_ms: NonNegFloat
    optimizer_cv: NonNegFloat
    share_of_wall: Fraction
    share_of_graph: Fraction
    unstable: bool = False
    # ArenaAdamW.step alone, captured as its own graph and replayed after the windows
    # (median ms): a cross-check of the in-graph events.
    separate_step_ms: float | None = None


# The phases a worker's setup is split into, in order (`WorkerResult.setup_phases`).
SETUP_PHASES = ("build", "trace", "compile", "first_run", "capture")

# The watchdog's start time, passed to its workers, which record it as `job_started_at`.
JOB_STARTED_AT_ENV = "THROUGHPUT_JOB_STARTED_AT"


class WorkerResult(_Record, frozen=True, kw_only=True):
    """What one worker run measured, or how it failed. Always written atomically."""

    outcome: Outcome
    recipe: Recipe
    parameters: NonNegInt
    mode: Literal["throughput", "optimizer-timing"] = "throughput"
    backend: str = ""
    protocol: Protocol = Protocol()
    setup_seconds: NonNegFloat | None = None
    # Where the setup's seconds went, in order, adding up to setup_seconds (tiny_llm.setup_clock):
    # build (model, arena, FP8 conversion, inputs), trace (TorchDynamo), compile (the backend:
    # inductor), first_run (the rest of the eager updates before capture: kernels' JIT, lazy
    # initialisation, running them), capture (the CUDA graph). {} where the worker did not split it.
    setup_phases: dict[str, NonNegFloat] = {}
    # Seconds from the process's start to the setup's (interpreter, imports, hardware query,
    # energy meter): GPU time a job spends before setup; None where it could not be read.
    startup_seconds: NonNegFloat | None = None
    calibration: Calibration | None = None
    windows: list[Window] = []
    throughput: Throughput | None = None
    optimizer_timing: OptimizerTiming | None = None
    memory: MemoryReport | None = None
    hardware: Hardware = Hardware()
    started_at: str = ""
    finished_at: str = ""
    # When the job's watchdog started, by the node's clock (JOB_STARTED_AT_ENV): against the
    # scheduler's Start it measures the node's clock skew (the audit's `clock_skew`), with no
    # import or compile time in it. "" where no watchdog ran the worker.
    job_started_at: str = ""
    exit_code: int = 0
    # Optimizer campaigns: the paired uninstrumented worker's result path, if any.
    baseline: str | None = None
    # Updates run eagerly during setup (before capture): the optimizer counter after
    # window i is setup_updates + warmup + calibration + (i+1)·N.
    setup_updates: NonNegInt = 0
    # The speed variants the update ran with (tiny_llm.kernels.Kernels.record(), "auto"
    # resolved, e.g. {"attention": "flash", "cross_entropy": "chunked", "optimizer": "triton",
    # "swiglu": "triton", ...}); {} in older results, and no "swiglu" (it ran "default") in
    # results from before the Triton SwiGLU became the default on CUDA.
    kernels: dict[str, str] = {}
    # Required: a result that names no worker is refused with the upgrade that names it.
    worker: WorkerIdentity
    # What the GPU's energy counter measured; None where there is none, with the reason in
    # energy_unavailable ("" in results from before energy was measured).
    energy: Energy | None = None
    energy_unavailable: str = ""
    # An FP8 precision's linears (None at BF16, and where the point never built its model).
    fp8: Fp8Linears | None = None
    # Which parameters each optimizer owned (`throughput_schema.muon.ownership`): {} where
    # AdamW owned them all (the guide's optimizer, and every result from before Muon).
    optimizer_owned: dict[str, list[str]] = {}
    # Whether the setup compiled from nothing or loaded what an earlier job of the campaign (or
    # its parent) compiled (`throughput_schema.compile_cache`); None in results from before it.
    compile_cache: CompileCache | None = None
