"""Every record that crosses a process or a file.

Conventions (msgspec's own advice): records are frozen; every field added after
version 1 gets a default so older files still decode, and every record skips fields it
does not know, so an older reader can still read a newer writer's output of the same
version. That holds for configuration embedded in records too (a result's recipe, a
manifest's profile and protocol). A typo in what a user writes is still an error: its
loaders convert it with `codec.convert_input`, which refuses fields `unknown_field` finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from throughput_schema.outcomes import Outcome
from throughput_schema.version import SCHEMA_VERSION

__all__ = [
    "AccountingRow",
    "BurstSample",
    "Calibration",
    "ClusterProfile",
    "CurveSummary",
    "FailedAttempt",
    "FrozenFile",
    "Hardware",
    "Manifest",
    "MemoryPeaks",
    "MemoryReport",
    "ModelConfig",
    "OptimizerConfig",
    "OptimizerTiming",
    "ParentCampaign",
    "PointSpec",
    "Protocol",
    "Receipt",
    "Recipe",
    "SubmissionIntent",
    "Throughput",
    "TrainingConfig",
    "Window",
    "WorkerResult",
    "RECORD_TYPES",
    "unknown_field",
]

PositiveInt = Annotated[int, Meta(gt=0)]
NonNegInt = Annotated[int, Meta(ge=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
Fraction = Annotated[float, Meta(ge=0, le=1)]


class _Config(msgspec.Struct, frozen=True, kw_only=True):
    pass


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = SCHEMA_VERSION


# --------------------------------------------------------------------------- recipe


class ModelConfig(_Config):
    """A Llama-style decoder: RMSNorm, SwiGLU, RoPE, no biases, tied embeddings."""

    n_layers: PositiveInt
    d_model: PositiveInt
    n_heads: PositiveInt
    ffn_dim: PositiveInt
    context_length: PositiveInt
    vocab_size: PositiveInt = 32_000
    head_dim: PositiveInt = 64
    rope_theta: PositiveFloat = 10_000.0
    norm_eps: PositiveFloat = 1e-5


class TrainingConfig(_Config):
    """One update = one micro-batch: there is no gradient accumulation."""

    micro_batch_size: PositiveInt
    batch_tokens: PositiveInt
    seed: int = 42
    grad_clip: PositiveFloat = 1.0
    autocast_dtype: Literal["bfloat16"] = "bfloat16"


class OptimizerConfig(_Config):
    name: Literal["adamw"] = "adamw"
    lr: NonNegFloat = 1e-3
    beta1: Fraction = 0.9
    beta2: Fraction = 0.99
    eps: PositiveFloat = 1e-8
    weight_decay: NonNegFloat = 0.1


class Recipe(_Record):
    """A resolved model recipe: the YAML preset with every `--set` applied."""

    name: str
    model: ModelConfig
    training: TrainingConfig
    optimizer: OptimizerConfig = OptimizerConfig()


# ------------------------------------------------------------------- cluster, protocol


class ClusterProfile(_Config):
    """Where and how jobs run. `scheduler: local` runs them as child processes."""

    name: str
    scheduler: Literal["slurm", "local"]
    account: str = ""
    partition: str = ""
    gpus_per_job: PositiveInt = 1
    cpus_per_task: PositiveInt = 8
    mem: str = "64G"
    time_limit_minutes: PositiveInt = 14
    watchdog_minutes: PositiveFloat = 13.0
    python: str = ".venv-aarch64/bin/python"
    max_concurrent_jobs: PositiveInt = 12
    extra_sbatch_args: list[str] = []


class Protocol(_Config):
    """The campaign's measurement protocol, applied to every model alike."""

    warmup: NonNegInt = 20
    calibration_updates: PositiveInt = 5
    windows: PositiveInt = 5
    extra_windows: NonNegInt = 5
    window_seconds: PositiveFloat = 10.0
    min_updates_per_window: PositiveInt = 20
    cv_threshold: PositiveFloat = 0.05
    lr: NonNegFloat = 1e-3
    beta1: Fraction = 0.9
    beta2: Fraction = 0.99
    eps: PositiveFloat = 1e-8
    weight_decay: NonNegFloat = 0.1
    grad_clip: PositiveFloat = 1.0
    seed: int = 42
    # Optimizer timing only: each synchronised burst of graph replays targets this.
    burst_seconds: PositiveFloat = 0.1


# ----------------------------------------------------------------------------- points


class PointSpec(_Record):
    """One point of a curve: a model at a context and a batch, one attempt."""

    model: str
    context_length: PositiveInt
    batch_size: PositiveInt
    attempt: PositiveInt = 1
    mode: Literal["throughput", "optimizer-timing"] = "throughput"

    @property
    def curve(self) -> str:
        return f"{self.model}-c{self.context_length}"


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """One synchronised wall-clock window: `updates` complete updates in `seconds`."""

    updates: PositiveInt
    seconds: PositiveFloat
    # The optimizer's update counter read after the window (exact-count check).
    counter_after: NonNegInt = 0


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


class WorkerResult(_Record):
    """What one worker run measured, or how it failed. Always written atomically."""

    outcome: Outcome
    recipe: Recipe
    parameters: NonNegInt
    mode: Literal["throughput", "optimizer-timing"] = "throughput"
    backend: str = ""
    protocol: Protocol = Protocol()
    setup_seconds: NonNegFloat | None = None
    calibration: Calibration | None = None
    windows: list[Window] = []
    throughput: Throughput | None = None
    optimizer_timing: OptimizerTiming | None = None
    memory: MemoryReport | None = None
    hardware: Hardware = Hardware()
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    # Optimizer campaigns: the paired uninstrumented worker's result path, if any.
    baseline: str | None = None
    # Updates run eagerly during setup (before capture): the optimizer counter after
    # window i is setup_updates + warmup + calibration + (i+1)·N.
    setup_updates: NonNegInt = 0
    # Opt-in speed variants the update ran with (tiny_llm.kernels.Kernels.record(),
    # e.g. {"attention": "flash", "cross_entropy": "chunked", ...}); {} in older results.
    kernels: dict[str, str] = {}


# ------------------------------------------------------------------------ submission


class SubmissionIntent(_Record):
    """Written and fsynced before `sbatch`: proof that a submission may exist."""

    token: str
    campaign: str
    point: PointSpec
    script_sha256: str
    created_at: str
    scheduler: Literal["slurm", "local"]


class AccountingRow(msgspec.Struct, frozen=True, kw_only=True):
    """One `sacct --parsable2` row, raw strings kept as Slurm printed them."""

    job_id: str
    job_name: str = ""
    state: str = ""
    exit_code: str = ""
    partition: str = ""
    account: str = ""
    timelimit: str = ""
    alloc_tres: str = ""
    req_mem: str = ""
    start: str = ""
    end: str = ""
    elapsed: str = ""
    comment: str = ""
    node_list: str = ""


class Receipt(_Record):
    """Written after the scheduler accepted the job; final accounting added later."""

    token: str
    job_id: str
    submitted_at: str
    scheduler: Literal["slurm", "local"]
    # True when the job was found in Slurm by its token after a crash.
    adopted: bool = False
    accounting: AccountingRow | None = None
    accounting_final: bool = False


# -------------------------------------------------------------------------- campaign


class FrozenFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    sha256: str
    size: NonNegInt


class ParentCampaign(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    manifest_sha256: str
    name: str = ""


class Manifest(_Record):
    """Frozen at campaign creation: a resumed campaign never changes its grid."""

    kind: Literal["throughput", "optimizer-timing"]
    name: str
    created_at: str
    models: list[str]
    contexts: list[PositiveInt]
    protocol: Protocol
    profile: ClusterProfile
    tool_version: str
    frozen_files: list[FrozenFile] = []
    max_batch: PositiveInt | None = None
    parent: ParentCampaign | None = None
    # Optimizer campaigns: curve name -> the parent's fitting batches, in order.
    inherited_batches: dict[str, list[int]] = {}
    parallel_points: bool = False
    # The module run with `python -m` inside each job (the throughput worker by default).
    worker: str = "tiny_llm"
    # The repository the campaign was created from (frozen copies come from here).
    source_root: str = ""


class FailedAttempt(msgspec.Struct, frozen=True, kw_only=True):
    batch_size: PositiveInt
    attempt: PositiveInt
    job_id: str
    outcome: str
    message: str = ""


class CurveSummary(_Record):
    """Where a curve stands; derived from the files under `curves/`, never stored state."""

    curve: str
    model: str
    context_length: PositiveInt
    state: Literal["pending", "running", "blocked", "bounded", "capped", "complete"]
    fitting_batches: list[int] = []
    fastest_stable_batch: int | None = None
    fastest_tokens_per_second: float | None = None
    largest_fitting_batch: int | None = None
    first_oom_batch: int | None = None
    unstable_batches: list[int] = []
    blocked_reason: str = ""
    failed_attempts: list[FailedAttempt] = []


RECORD_TYPES: dict[str, type] = {
    "recipe": Recipe,
    "cluster-profile": ClusterProfile,
    "protocol": Protocol,
    "point-spec": PointSpec,
    "worker-result": WorkerResult,
    "submission-intent": SubmissionIntent,
    "receipt": Receipt,
    "accounting-row": AccountingRow,
    "manifest": Manifest,
    "curve-summary": CurveSummary,
}


def unknown_field(raw: Mapping[str, Any], type_: type[msgspec.Struct], at: str = "$") -> str | None:
    """The first key of user input that `type_` (or a record nested in it) has no field
    for, as one line naming it, where it is and what would be accepted; None if none."""
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(type_)}
    for key, value in raw.items():
        if key not in fields:
            known = ", ".join(name for name in fields if name != "schema_version")
            return f"unknown field `{key}` at `{at}`; {type_.__name__} fields are {known}"
        nested = fields[key]
        if isinstance(value, Mapping) and isinstance(nested, type) and issubclass(nested, msgspec.Struct):
            found = unknown_field(value, nested, f"{at}.{key}")
            if found:
                return found
    return None
