"""`python -m tiny_llm benchmark-throughput-worker`: measure one point, write its result.

The recipe and the protocol come either from `--config` with `--set` overrides and the
protocol flags (a person's command line, as in docs/guide.md) or from `--request PATH`, an
attempt's `WorkerRequest` (a campaign job's command line), never from both.

`--compile-cache DIR` loads the compiled update from DIR where a run of the same point saved
it, else compiles it and saves it there (`tiny_llm.compile_cache`); a request names its
campaign's folder, and a person's command line has none unless asked.

Exit status: 0 ok, 1 crashed, 2 bad input, 3 cuda_oom, 4 compile_error, 5 nonfinite
(see `tiny_llm.worker`). Bad input is one line on stderr and no result file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from throughput_schema import EXIT_CODES, Protocol, Recipe, SchemaError, WorkerRequest, outcome_kind, read
from throughput_schema.argparsing import add_optimizer_name
from throughput_schema.node_local import ResultNotWritten
from throughput_schema.precision import (
    GUIDE_PRECISION,
    PRECISIONS,
    is_fp8,
    mfu_label,
    peak_fp8_flops,
    unknown_precision,
)
from throughput_schema.recipe import load_recipe
from tiny_llm.compile_cache import OFF, folders_for
from tiny_llm.recipe_args import add_recipe_args

# The protocol's fields a person may set by flag (the rest keep the record's defaults); a
# request carries the whole record itself.
DEFAULT = Protocol()
PROTOCOL_HELP = {
    "warmup": f"warm-up updates after setup (default {DEFAULT.warmup})",
    "windows": f"measurement windows (default {DEFAULT.windows}; +{DEFAULT.extra_windows} if CV > "
    f"{DEFAULT.cv_threshold * 100:g}%%)",  # %% is argparse's percent sign
    "window_seconds": f"target seconds per window (default {DEFAULT.window_seconds:g})",
    "min_updates_per_window": f"lower bound on updates per window (default {DEFAULT.min_updates_per_window})",
}
PROTOCOL_FLAGS = tuple(PROTOCOL_HELP)


class UsageError(ValueError):
    pass


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "benchmark-throughput-worker",
        help="measure one point's training throughput and write its result JSON",
        description="Measure the complete-update throughput of one recipe (the guide's individual point).",
    )
    add_recipe_args(p, required=False)
    p.add_argument(
        "--request",
        type=Path,
        help="an attempt's request.json: its recipe and protocol, instead of --config, --set and the protocol flags",
    )
    p.add_argument("--output", type=Path, required=True, help="the result JSON, written atomically")
    p.add_argument(
        "--precision",
        help=f"training precision: {', '.join(PRECISIONS)} (default {GUIDE_PRECISION}, the guide's: BF16 autocast; "
        "fp8-*: torchao's float8 linears, on a GPU with FP8 matrix units and the tiny-llm[fp8] extra)",
    )
    add_optimizer_name(p, "the update trains with (the same as --set optimizer.name=NAME)")
    for name, text in PROTOCOL_HELP.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(getattr(DEFAULT, name)), help=text)
    p.add_argument(
        "--optimizer-timing",
        action="store_true",
        help="time ArenaAdamW.step inside the update in bursts: three external CUDA events in the update graph (host clock readings on the CPU)",
    )
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="default: cuda if available")
    from tiny_llm.energy_meter import ENERGY_MODES

    p.add_argument(
        "--energy",
        choices=ENERGY_MODES,
        default="auto",
        help="auto: read the GPU's energy counter (NVML) around setup and each window, where there is "
        "one; off: do not read it (the result says energy null, turned off)",
    )
    p.add_argument(
        "--compile-mode",
        default=None,
        help="torch.compile mode for the model (default: inductor's default; the update graph is captured by us)",
    )
    p.add_argument(
        "--compile-cache",
        metavar="DIR",
        help=f"load the compiled update from DIR where an earlier run of the same point saved it, else "
        f"compile and save it there ({OFF}: neither; default: the request's folder, {OFF} without --request)",
    )
    _add_kernel_flags(p)
    p.set_defaults(func=main)


def _add_kernel_flags(p: argparse.ArgumentParser) -> None:
    """The speed variants (tiny_llm.kernels); the defaults are the measured behaviour, and the
    choice is recorded in the result's `kernels` ("auto" as the kernel it resolved to)."""
    from tiny_llm.kernels import (
        ATTENTION,
        CE_CHUNK_TOKENS,
        CROSS_ENTROPY,
        INDUCTOR_TUNING,
        NORM,
        OPTIMIZER,
        ROPE,
        SWIGLU,
    )

    p.add_argument(
        "--attention-backend",
        choices=ATTENTION,
        default="auto",
        help="attention kernel (default auto: fa4 on a Hopper GPU with the tiny-llm[fa4] extra at contexts "
        "of at least 512, else sdpa; sdpa: PyTorch chooses among its SDPA kernels; flash, cudnn, efficient, "
        "math: pin one of them; fa4: FlashAttention-4)",
    )
    p.add_argument(
        "--cross-entropy",
        choices=CROSS_ENTROPY,
        default="default",
        help="default: F.cross_entropy over all logits; chunked: LM head + loss fused over token chunks",
    )
    p.add_argument(
        "--ce-chunk-tokens",
        type=int,
        default=CE_CHUNK_TOKENS,
        help=f"tokens per chunk for --cross-entropy chunked (default {CE_CHUNK_TOKENS})",
    )
    p.add_argument(
        "--swiglu-kernel",
        choices=SWIGLU,
        default="auto",
        help="auto: triton on CUDA where triton imports, else default; triton: SwiGLU forward and "
        "backward as one Triton pass each (tiny_llm.triton_swiglu); default: inductor's fusion",
    )
    p.add_argument(
        "--norm-kernel",
        choices=NORM,
        default="default",
        help="triton: each residual add, RMSNorm and cast as one Triton pass forward and backward "
        "(tiny_llm.triton_norm); default: inductor's fusion",
    )
    p.add_argument(
        "--rope-kernel",
        choices=ROPE,
        default="auto",
        help="triton: q and k rotated from the QKV projection's output and d(qkv) written whole, "
        "one Triton pass each way (tiny_llm.triton_rope); default: inductor's fusion; "
        "auto (the default): triton beside FlashAttention-4, else default",
    )
    p.add_argument(
        "--inductor-tuning",
        choices=INDUCTOR_TUNING,
        default="default",
        help="coordinate-descent: inductor tunes its generated kernels (longer compile)",
    )
    p.add_argument(
        "--optimizer-kernel",
        choices=OPTIMIZER,
        default="auto",
        help="ArenaAdamW's kernel (auto: triton on CUDA where triton imports, else fused on CUDA, tensor "
        "on CPU; triton: two Triton passes, CUDA only; fused: torch._fused_adamw_; compiled: its "
        "step through inductor)",
    )


def resolve(args: argparse.Namespace) -> tuple[Recipe, Protocol]:
    """The recipe to measure and the protocol record to measure it with; fills in the flags.

    Raises UsageError; a bad --config or --set raises RecipeError (one line, exit 2).
    """
    if args.request is None:
        if args.config is None:
            raise UsageError("give --config PRESET (and any --set) or --request REQUEST.json")
        for name in PROTOCOL_FLAGS:
            if getattr(args, name) is None:
                setattr(args, name, getattr(DEFAULT, name))
        protocol = msgspec.structs.replace(DEFAULT, **{name: getattr(args, name) for name in PROTOCOL_FLAGS})
        named = [f"optimizer.name={args.optimizer_name}"] if args.optimizer_name else []
        args.cache_folders = folders_for(args.compile_cache or OFF, "", (), "")
        return _with_precision(load_recipe(args.config, [*args.overrides, *named]), args.precision), protocol
    given = [f"--{n.replace('_', '-')}" for n in (*PROTOCOL_FLAGS, "precision") if getattr(args, n) is not None]
    given += ["--config"] * (args.config is not None) + ["--set"] * bool(args.overrides)
    given += ["--optimizer-name"] * (args.optimizer_name is not None)
    if given:
        raise UsageError(f"--request carries the recipe and the protocol; drop {', '.join(given)}")
    try:
        request = read(args.request, WorkerRequest)
    except SchemaError as exc:
        raise UsageError(f"--request: {exc}") from None
    for name in PROTOCOL_FLAGS:
        setattr(args, name, getattr(request.protocol, name))
    args.cache_folders = folders_for(
        args.compile_cache, request.compile_cache, request.compile_cache_read, request.campaign
    )
    return request.recipe, request.protocol


def _with_precision(recipe: Recipe, precision: str | None) -> Recipe:
    """The recipe with `--precision` applied (it wins over a `--set training.precision`)."""
    if precision is None:
        return recipe
    refusal = unknown_precision(precision)
    if refusal is not None:
        raise UsageError(refusal)
    return msgspec.structs.replace(recipe, training=msgspec.structs.replace(recipe.training, precision=precision))


def _check_precision(recipe: Recipe, device: str, cuda: bool) -> None:
    """FP8 on the CPU, asked for at the command line: refused before anything is written."""
    if is_fp8(recipe.training.precision) and (device == "cpu" or not cuda):
        raise UsageError(
            f"--precision {recipe.training.precision} trains only on a CUDA GPU with FP8 matrix units and "
            "this run is on the CPU; use --precision bf16 here"
        )


def _check(args: argparse.Namespace) -> None:
    if args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
    if args.windows < 1:
        raise UsageError(f"--windows must be >= 1, got {args.windows}")
    if not args.window_seconds > 0:
        raise UsageError(f"--window-seconds must be > 0, got {args.window_seconds}")
    if args.min_updates_per_window < 1:
        raise UsageError(f"--min-updates-per-window must be >= 1, got {args.min_updates_per_window}")
    if args.ce_chunk_tokens < 1:
        raise UsageError(f"--ce-chunk-tokens must be >= 1, got {args.ce_chunk_tokens}")
    if args.output.exists() and args.output.is_dir():
        raise UsageError(f"--output {args.output} is a directory; give a file path such as {args.output}/result.json")


def main(args: argparse.Namespace) -> int:
    try:
        recipe, protocol = resolve(args)  # RecipeError -> one line, exit 2 (cli.main)
        _check(args)
        kernels = kernels_from_args(args)
        _check_kernels(kernels, recipe)
        _check_optimizer(recipe)
        import torch

        if args.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available (use --device cpu or auto)")
        if args.request is None:  # a campaign's job says it in its result: a refused point
            _check_precision(recipe, args.device, torch.cuda.is_available())
    except UsageError as exc:
        print(f"tiny_llm: {exc}", file=sys.stderr)
        return 2

    from tiny_llm.worker import WorkerOptions, run_worker

    options = WorkerOptions(
        protocol=protocol,
        optimizer_timing=args.optimizer_timing,
        device=args.device,
        compile_mode=args.compile_mode,
        kernels=kernels,
        energy=args.energy,
        compile_cache=args.cache_folders,
    )
    try:
        result = run_worker(recipe, args.output, options)
    except ResultNotWritten as exc:
        print(f"tiny_llm: {exc}", file=sys.stderr)
        return EXIT_CODES["storage_full"]
    print(summary_line(result, args.output))
    return result.exit_code


def _check_optimizer(recipe: Recipe) -> None:
    """Muon needs a matrix to own (`throughput_schema.muon`); refused before anything runs."""
    from throughput_schema.muon import MUON, NoMuonMatrix, muon_matrices
    from throughput_schema.precision import unmeasured_pairing

    refusal = unmeasured_pairing(recipe.training.precision, recipe.optimizer.name)
    if refusal is not None:
        raise UsageError(refusal)
    if recipe.optimizer.name == MUON:
        try:
            muon_matrices(recipe.model)
        except NoMuonMatrix as exc:
            raise UsageError(str(exc)) from None


def _check_kernels(kernels, recipe: Recipe) -> None:
    """A kernel chosen explicitly that cannot build this recipe's model is refused here, before
    anything runs (the model refuses it too, `tiny_llm.kernel_registry.load_triton`)."""
    from tiny_llm.kernels import unsupported

    if recipe.optimizer.name == "muon" and kernels.optimizer == "triton":
        raise UsageError(
            "--optimizer-kernel triton normalises AdamW's arena alone; with Muon use auto or fused, "
            "whose norm covers Muon's gradients too"
        )
    for field, choice in kernels.record().items():
        reason = unsupported(field, recipe.model) if choice == "triton" else None
        if reason is not None:
            raise UsageError(reason)


def kernels_from_args(args: argparse.Namespace):
    from tiny_llm.kernels import Kernels

    return Kernels(
        attention=args.attention_backend,
        cross_entropy=args.cross_entropy,
        ce_chunk_tokens=args.ce_chunk_tokens,
        swiglu=args.swiglu_kernel,
        compile_mode=args.compile_mode,
        inductor_tuning=args.inductor_tuning,
        optimizer=args.optimizer_kernel,
        norm=args.norm_kernel,
        rope=args.rope_kernel,
    )


def automatic_kernels(device_type: str, cfg) -> dict[str, str]:
    """What a result records for `Kernels()` for this model on this kind of device ("auto" resolved)."""
    import torch

    from tiny_llm.kernel_registry import resolve_kernels
    from tiny_llm.kernels import Kernels

    return resolve_kernels(Kernels(), torch.device(device_type), cfg).record()


def summary_line(result, output: Path) -> str:
    kind = outcome_kind(result.outcome)
    head = f"{result.recipe.name} L={result.recipe.model.context_length} B={result.recipe.training.micro_batch_size}"
    if kind != "ok":
        return f"{head}: {kind} in {result.outcome.phase or '?'}: {result.outcome.message}; result: {output}"
    t = result.throughput
    mfu = f"{t.mfu:.1%}" if t.mfu is not None else "n/a (peak unknown)"
    text = (
        f"{head} [{result.backend}]: {t.tokens_per_second:,.0f} tokens/s, {t.sequences_per_second:,.2f} sequences/s, "
        f"{mfu_label(result.recipe.training.precision)} {mfu}{fp8_text(result)}, CV {t.cv:.2%} over {len(result.windows)} windows"
        f"{' UNSTABLE' if t.unstable else ''}, setup {result.setup_seconds:.1f} s{cache_text(result)}"
    )
    automatic = automatic_kernels("cuda" if result.backend.startswith("cuda") else "cpu", result.recipe.model)
    variants = {k: v for k, v in result.kernels.items() if v != automatic.get(k)}
    if variants:
        text += " [" + ", ".join(f"{k}={v}" for k, v in variants.items()) + "]"
    if result.optimizer_timing is not None:
        o = result.optimizer_timing
        sep = f", alone {o.separate_step_ms:.3f} ms" if o.separate_step_ms is not None else ""
        text += (
            f"; optimizer {o.optimizer_ms:.3f} ms/update (CV {o.optimizer_cv:.2%}{sep}), "
            f"{o.share_of_wall:.1%} of wall, {o.share_of_graph:.1%} of graph"
        )
    return f"{text}; {energy_text(result)}; result: {output}"


def cache_text(result) -> str:
    """Beside the setup: whether it compiled (cold) or loaded an earlier run's compile (warm)."""
    cache = result.compile_cache
    return f" ({cache.state})" if cache is not None and cache.state != "off" else ""


def energy_text(result) -> str:
    """The summary line's energy: joules per token and mean power, or why there is none."""
    e = result.energy
    if e is None:
        return f"energy n/a ({result.energy_unavailable or 'not recorded'})"
    limit = f", limit {e.power_limit_watts:.0f} W" if e.power_limit_watts is not None else ""
    span = " over the bursts' span" if e.interval == "span" else ""
    return f"energy {e.joules_per_token:.4g} J/token, {e.mean_watts:.0f} W mean{span}{limit}"


def fp8_text(result) -> str:
    """Beside an FP8 point's MFU: its precision, the linears that ran in FP8, the FP8 peak."""
    precision = result.recipe.training.precision
    if not is_fp8(precision):
        return ""
    fp8 = result.fp8
    linears = f": {len(fp8.converted)} of {len(fp8.converted) + len(fp8.kept)} linears in FP8" if fp8 else ""
    peak = peak_fp8_flops(result.hardware.gpu_name, result.hardware.gpu_memory_bytes)
    beside = f"; FP8 peak {peak / 1e12:,.0f} TFLOP/s" if peak else ""
    return f" ({precision}{linears}{beside})"
