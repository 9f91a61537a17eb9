"""The training precision of a campaign's points: BF16 autocast (the guide's protocol) or
torchao's float8 training of the model's linears, and which linears an FP8 recipe converts.

A precision is a protocol setting (`Protocol.precision`, copied into every recipe's
`training.precision`). The layer filter lives here, not in the worker, so that the worker
(applying it to the linears of the model it built) and the audit (applying it to the shapes
the recipe implies, `throughput_schema.shape.weight_shapes`) decide alike.

MFU stays one definition at every precision: the same training FLOPs per token over the dense
BF16 peak. An FP8 point's MFU is therefore "BF16-equivalent": comparable with a BF16 point's,
and able to exceed what the BF16 matrix units could reach; `peak_fp8_flops` is shown beside it.
"""

from __future__ import annotations

from typing import Literal, get_args

from throughput_schema.gpus import peak_bf16_flops

Precision = Literal["bf16", "fp8-tensorwise", "fp8-rowwise"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
GUIDE_PRECISION = "bf16"
# torchao's `Float8LinearConfig.from_recipe_name` names, by precision.
FP8_RECIPES = {"fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise"}
# FP8 matrix units: Ada (sm89) and Hopper (sm90) onwards.
FP8_MIN_CAPABILITY = (8, 9)
# The GPUs of `gpus.PEAK_BF16` with FP8 matrix units run dense FP8 at twice their dense BF16
# rate (NVIDIA's Hopper datasheets: 3,958 against 1,979 TFLOPS with sparsity, SXM).
_FP8_GPU_PREFIXES = ("NVIDIA H100", "NVIDIA H200", "NVIDIA GH200")
# The linears that stay BF16 whatever their shape: the LM head is the embedding where tied, and
# the chunked and fused losses read its weight directly rather than calling the module.
KEPT_BY_NAME = {"lm_head": "the LM head stays BF16 (tied to the embedding, or read by the loss kernels)"}


def is_fp8(precision: str) -> bool:
    return precision in FP8_RECIPES


def unknown_precision(value: str, where: str = "--precision") -> str | None:
    """The one line refusing a precision this tool does not know, or None."""
    if value in PRECISIONS:
        return None
    return f"{where} {value!r}: unknown precision; use one of {', '.join(PRECISIONS)} (default {GUIDE_PRECISION})"


def unmeasured_pairing(precision: str, optimizer: str) -> str | None:
    """The one line refusing FP8 linears with Muon, or None: each is measured alone before
    the two are offered together."""
    if not is_fp8(precision) or optimizer != "muon":
        return None
    return (
        f"precision {precision} with optimizer muon: the pair is not measured yet; use FP8 with AdamW, or Muon at bf16"
    )


def precision_deviation(precision: str) -> str | None:
    """The line beside a campaign's figures when its precision is not the guide's, or None."""
    if precision == GUIDE_PRECISION:
        return None
    return (
        f"precision differs from the guide: {precision} (guide: {GUIDE_PRECISION}); "
        "MFU is BF16-equivalent (the same FLOPs over the dense BF16 peak)"
    )


def precision_label(precision: str) -> str:
    """The precision as tables name it: what it is, and whether it is the guide's."""
    if precision == GUIDE_PRECISION:
        return f"`{precision}` (BF16 autocast over FP32 weights, the guide's)"
    return f"`{precision}` (torchao's float8 linears, {FP8_RECIPES[precision]} scaling, besides BF16 autocast)"


def mfu_label(precision: str) -> str:
    return "MFU" if precision == GUIDE_PRECISION else "BF16-equivalent MFU"


def peak_fp8_flops(name: str, memory_bytes: int) -> float | None:
    """The dense FP8 peak of a known GPU with FP8 matrix units, else None."""
    peak = peak_bf16_flops(name, memory_bytes)
    return 2 * peak if peak is not None and name.startswith(_FP8_GPU_PREFIXES) else None


def fp8_kept_reason(precision: str, name: str, out_features: int, in_features: int) -> str | None:
    """Why the linear `name` (weight out x in) stays BF16 under an FP8 `precision`; None: it
    converts. The shape thresholds are torchao's auto filters (`_auto_filter_for_recipe`, from
    its H100 tables, as torchtitan applies them): below them the casts cost more than FP8 gains."""
    if name.split(".")[-1] in KEPT_BY_NAME:
        return KEPT_BY_NAME[name.split(".")[-1]]
    n, k = out_features, in_features
    if n % 16 or k % 16:
        return f"{n}x{k}: FP8 matmuls need both dimensions divisible by 16"
    small = f"{n}x{k}: too small to gain from {precision}"
    if precision == "fp8-tensorwise" and k <= 4096 and n <= 1024:
        return small + " (tensorwise gains where in > 4096 or out > 1024)"
    if precision == "fp8-rowwise" and (n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048)):
        return small + " (rowwise gains where out > 2048, in > 1024, and out > 4096 or in > 2048)"
    return None


def fp8_plan(precision: str, linears: dict[str, tuple[int, int]]) -> tuple[list[str], dict[str, str]]:
    """Of linears (name -> (out, in)): the names an FP8 `precision` converts, and why each other stays BF16."""
    converted: list[str] = []
    kept: dict[str, str] = {}
    for name, (n, k) in linears.items():
        reason = fp8_kept_reason(precision, name, n, k)
        if reason is None:
            converted.append(name)
        else:
            kept[name] = reason
    return converted, kept


def recipe_linears(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, int]]:
    """The linears of a model by module name (out, in), from its weight table
    (`throughput_schema.shape.weight_shapes`): every 2-D weight but the embedding, and the LM
    head, which the model always has (the embedding itself where tied)."""
    out: dict[str, tuple[int, int]] = {}
    for name, shape in shapes.items():
        if len(shape) == 2 and name.endswith(".weight") and name != "embed.weight":
            out[name.removesuffix(".weight")] = (shape[0], shape[1])
    vocab, width = shapes["embed.weight"][:2]
    out.setdefault("lm_head", (vocab, width))
    return out
