"""Throughput + optimizer-timing campaign pairs for the report, from a pretend GPU.

A small, deterministic model of a GPU: the rate saturates with batch, memory grows
with batch until the capacity, the optimizer costs a fixed time per update. Every
derived figure a worker records (window rates, medians, CVs, event-weighted
optimizer milliseconds) is written so that it agrees with its raw inputs, so the
report's checks pass unless a test breaks a file on purpose.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from campaign_builder.energy import with_energy
from campaign_builder.files import sha256, write_attempt_files
from campaign_builder.results import throughput_of, timing_of
from throughput_schema import codec
from throughput_schema.layout import BASELINE, CURVES, MANIFEST, RESULT, attempt_dir, curve_name
from throughput_schema.outcomes import CudaOom, Ok, Timeout
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.recipe import flops_per_token, load_recipe, parameter_count, with_point
from throughput_schema.records import (
    BurstSample,
    Calibration,
    ClusterProfile,
    Hardware,
    JobAccounting,
    Manifest,
    MemoryPeaks,
    MemoryReport,
    ParentCampaign,
    Protocol,
    Receipt,
    Window,
    WorkerIdentity,
    WorkerResult,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GPU_BYTES = 150_754_820_096  # an H200's reported total memory
HARDWARE = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=GPU_BYTES, gpu_count=1, hostname="gpu-test")
PROTOCOL = Protocol()


@dataclass(frozen=True)
class Gpu:
    """How fast and how large the pretend GPU is."""

    peak_flops: float = 989e12
    mfu: float = 0.42
    half_batch_tokens: float = 4096.0  # tokens per update at half the saturated rate
    optimizer_bandwidth: float = 0.6e12  # bytes/s for the weight, gradient and moment traffic
    capacity: int = GPU_BYTES
    # Board power at saturation, read by the energy counter around every window; None: no counter.
    watts: float | None = None


def recipe_for(model: str, context: int, batch: int):
    return with_point(
        load_recipe(CONFIGS / f"{model}.yaml"), context_length=context, batch_size=batch, protocol=PROTOCOL
    )


def memory_bytes(recipe, batch: int) -> int:
    m = recipe.model
    per_token = m.vocab_size * 6 + m.n_layers * m.d_model * 40
    return 16 * parameter_count(m) + batch * m.context_length * per_token + 600_000_000


def largest_fitting(model: str, context: int, gpu: Gpu = Gpu()) -> int:
    batch = 1
    while memory_bytes(recipe_for(model, context, 2 * batch), 2 * batch) <= gpu.capacity:
        batch *= 2
    return batch


def _rate(recipe, batch: int, gpu: Gpu, *, factor: float = 1.0) -> float:
    m = recipe.model
    flops = flops_per_token(m)
    tokens = batch * m.context_length
    return factor * gpu.peak_flops * gpu.mfu / flops * tokens / (tokens + gpu.half_batch_tokens)


def _jitter(seed: str, i: int, spread: float) -> float:
    digest = hashlib.sha256(f"{seed}/{i}".encode()).digest()
    return 1.0 + spread * (int.from_bytes(digest[:4], "big") / 2**32 - 0.5)


def worker_result(
    model: str,
    context: int,
    batch: int,
    *,
    gpu: Gpu = Gpu(),
    seed: str = "",
    instrumented: bool = False,
    rate_factor: float = 1.0,
    spread: float = 0.01,
) -> tuple[WorkerResult, list[BurstSample]]:
    """A fitting worker's result; instrumented results carry optimizer timing and bursts."""
    recipe = recipe_for(model, context, batch)
    P = parameter_count(recipe.model)
    rate = _rate(recipe, batch, gpu, factor=rate_factor * (0.985 if instrumented else 1.0))
    tokens = batch * context
    per_window = max(PROTOCOL.min_updates_per_window, round(PROTOCOL.window_seconds * rate / tokens))
    windows = []
    setup_updates = 3
    counter = setup_updates + PROTOCOL.warmup + PROTOCOL.calibration_updates
    for i in range(PROTOCOL.windows):
        r = rate * _jitter(seed, i, spread)
        seconds = per_window * tokens / r
        counter += per_window
        windows.append(Window(updates=per_window, seconds=seconds, counter_after=counter))
    throughput = throughput_of(windows, batch, context, PROTOCOL)
    update_ms = throughput.update_ms
    bursts: list[BurstSample] = []
    timing = None
    if instrumented:
        opt_ms = 1000.0 * 16 * P / gpu.optimizer_bandwidth
        for i, w in enumerate(windows):
            per_burst = max(1, round(PROTOCOL.burst_seconds * 1000.0 / (w.seconds * 1000.0 / w.updates)))
            left = w.updates
            j = 0
            while left:
                n = min(per_burst, left)
                left -= n
                bursts.append(
                    BurstSample(
                        window=i,
                        updates=n,
                        wall_seconds=n * w.seconds / w.updates,
                        graph_ms=update_ms * 0.97 * _jitter(seed + "g", 1000 * i + j, 0.01),
                        optimizer_ms=opt_ms * _jitter(seed + "o", 1000 * i + j, 0.02),
                    )
                )
                j += 1
        timing = timing_of(windows, bursts, PROTOCOL)
    mem = memory_bytes(recipe, batch)
    result = WorkerResult(
        worker=WorkerIdentity(module=PRODUCTION_WORKER),
        outcome=Ok(),
        recipe=recipe,
        parameters=P,
        mode="optimizer-timing" if instrumented else "throughput",
        backend="cuda-graph",
        protocol=PROTOCOL,
        setup_seconds=60.0,
        setup_phases={"build": 6.0, "trace": 12.0, "compile": 30.0, "first_run": 9.0, "capture": 3.0},
        startup_seconds=10.0,
        calibration=Calibration(updates=PROTOCOL.calibration_updates, seconds=1.0, updates_per_window=per_window),
        windows=windows,
        throughput=throughput,
        optimizer_timing=timing,
        memory=MemoryReport(
            setup=MemoryPeaks(allocated_bytes=int(mem * 0.8), reserved_bytes=int(mem * 0.9)),
            measurement=MemoryPeaks(allocated_bytes=int(mem * 0.85), reserved_bytes=mem),
            device_total_bytes=gpu.capacity,
        ),
        hardware=HARDWARE,
        setup_updates=setup_updates,
        started_at="2026-10-08T10:00:00Z",
        finished_at="2026-10-08T10:05:00Z",
    )
    if gpu.watts is not None:
        # Power rises with the work in flight, as the rate does: small batches idle the board.
        result = with_energy(result, watts=gpu.watts * (0.4 + 0.6 * tokens / (tokens + gpu.half_batch_tokens)))
    return result, bursts


def oom_result(model: str, context: int, batch: int) -> WorkerResult:
    recipe = recipe_for(model, context, batch)
    return WorkerResult(
        worker=WorkerIdentity(module=PRODUCTION_WORKER),
        outcome=CudaOom(phase="graph-capture", message="CUDA out of memory. Tried to allocate 2.00 GiB"),
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        protocol=PROTOCOL,
        hardware=HARDWARE,
        exit_code=3,
    )


def timeout_result(model: str, context: int, batch: int) -> WorkerResult:
    recipe = recipe_for(model, context, batch)
    return WorkerResult(
        worker=WorkerIdentity(module=PRODUCTION_WORKER),
        outcome=Timeout(phase="measurement", deadline_seconds=780.0),
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        protocol=PROTOCOL,
        hardware=HARDWARE,
        exit_code=6,
    )


# Every job's accounting: 330 s of elapsed time, the 300 s its results span and teardown.
JOB_ELAPSED_SECONDS = 330.0


def _receipt(n: int) -> Receipt:
    accounting = JobAccounting(
        job_id=str(1000 + n),
        state="completed",
        start="2026-10-08T10:00:00+00:00",
        end="2026-10-08T10:05:30+00:00",
        elapsed_seconds=JOB_ELAPSED_SECONDS,
        exit_code=0,
        signal=0,
    )
    return Receipt(
        token=f"tok-{n}",
        job_id=str(1000 + n),
        submitted_at="2026-10-08T09:59:00Z",
        scheduler="slurm",
        accounting=accounting,
        accounting_final=True,
    )


def _manifest(kind, name, models, contexts, **extra) -> Manifest:
    return Manifest(
        kind=kind,
        name=name,
        created_at="2026-10-08T09:00:00Z",
        models=list(models),
        contexts=list(contexts),
        protocol=PROTOCOL,
        profile=ClusterProfile(name="test", scheduler="slurm"),
        tool_version="0.1.0",
        **extra,
    )


def write_throughput(root: Path, models, contexts, *, gpu: Gpu = Gpu(), largest=None) -> Path:
    """A completed throughput campaign: every curve doubles from 1 to a confirmed OOM."""
    root = Path(root)
    codec.write_atomic(root / MANIFEST, _manifest("throughput", root.name, models, contexts))
    n = 0
    for model in models:
        for context in contexts:
            top = (largest or {}).get((model, context)) or largest_fitting(model, context, gpu)
            batch = 1
            while batch <= top:
                where = attempt_dir(root, model, context, batch, 1)
                result, _ = worker_result(model, context, batch, gpu=gpu, seed=f"t/{model}/{context}/{batch}")
                write_attempt_files(where, result=result, receipt=_receipt(n := n + 1))
                batch *= 2
            where = attempt_dir(root, model, context, batch, 1)
            write_attempt_files(where, result=oom_result(model, context, batch), receipt=_receipt(n := n + 1))
    return root


def fitting_batches(throughput: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    manifest = codec.read(Path(throughput) / MANIFEST, Manifest)
    for model in manifest.models:
        for context in manifest.contexts:
            curve = Path(throughput) / CURVES / curve_name(model, context)
            batches = sorted(int(p.name[1:]) for p in curve.iterdir())
            out[f"{model}-c{context}"] = [
                b
                for b in batches
                if codec.read(attempt_dir(throughput, model, context, b, 1) / RESULT, WorkerResult).outcome == Ok()
            ]
    return out


def write_optimizer(root: Path, throughput: Path, *, gpu: Gpu = Gpu(), baseline_factor: float = 1.0) -> Path:
    """An optimizer-timing follow-up of `throughput`: baseline + instrumented worker per point."""
    root, throughput = Path(root), Path(throughput)
    parent = codec.read(throughput / MANIFEST, Manifest)
    inherited = fitting_batches(throughput)
    sha = sha256(throughput / MANIFEST)
    codec.write_atomic(
        root / MANIFEST,
        _manifest(
            "optimizer-timing",
            root.name,
            parent.models,
            parent.contexts,
            parent=ParentCampaign(path=str(throughput), manifest_sha256=sha, name=parent.name),
            inherited_batches=inherited,
            parallel_points=True,
        ),
    )
    n = 0
    for curve, batches in inherited.items():
        model, _, context = curve.rpartition("-c")
        for batch in batches:
            where = attempt_dir(root, model, int(context), batch, 1)
            seed = f"o/{curve}/{batch}"
            base, _ = worker_result(model, int(context), batch, gpu=gpu, seed=seed + "b", rate_factor=baseline_factor)
            result, bursts = worker_result(model, int(context), batch, gpu=gpu, seed=seed, instrumented=True)
            write_attempt_files(
                where,
                receipt=_receipt(n := n + 1),
                result=msgspec.structs.replace(result, baseline=BASELINE),
                baseline=base,
                bursts=bursts,
            )
    return root


def write_pair(root: Path, name: str, models, contexts, **kw) -> tuple[Path, Path]:
    t = write_throughput(Path(root) / f"{name}-throughput", models, contexts, **kw)
    o = write_optimizer(Path(root) / f"{name}-optimizer", t, **{k: v for k, v in kw.items() if k == "gpu"})
    return t, o


__all__ = [
    "Gpu",
    "largest_fitting",
    "oom_result",
    "recipe_for",
    "timeout_result",
    "worker_result",
    "write_optimizer",
    "write_pair",
    "write_throughput",
]
