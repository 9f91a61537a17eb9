"""FP8 linears in the complete update: torchao's float8 training (the tiny-llm[fp8] extra).

`convert` swaps the linears that `throughput_schema.precision.fp8_plan` picks for torchao's
`Float8Linear`, before the optimizer's arena is built and before compile and capture, so the
casts and their dynamic scales (amax reductions on the device, no host synchronisation) are
part of the captured update graph. Weights stay the FP32 parameters the arena owns; the
casts happen in each forward and backward.

Only a CUDA GPU with FP8 matrix units runs it (`unavailable` says why not, and the worker
ends such a point `refused`). `emulate=True` is torchao's emulation of the FP8 matmuls in
higher precision, for the CPU tests only: the worker never passes it.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from throughput_schema import Fp8Linears
from throughput_schema.precision import FP8_MIN_CAPABILITY, FP8_RECIPES, fp8_plan, is_fp8

FIX = (
    "install tiny-llm's fp8 extra in the compute environment (uv sync --locked --all-packages --extra fp8, "
    "or pip install 'tiny-llm[fp8]'), or run --precision bf16"
)


class Fp8Unavailable(RuntimeError):
    """This node cannot train the asked FP8 precision: the point is refused, not failed."""

    def __init__(self, cause: str, fix: str) -> None:
        self.cause, self.fix = cause, fix
        super().__init__(f"{cause}; {fix}")


def torchao_missing() -> str | None:
    """Why torchao's float8 training does not import here, or None."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        return f"torchao's float8 training does not import ({exc})"
    return None


def unavailable(precision: str, device: torch.device) -> Fp8Unavailable | None:
    """Why `precision` cannot train on `device`, or None (BF16 always can)."""
    if not is_fp8(precision):
        return None
    if device.type != "cuda":
        return Fp8Unavailable(
            f"{precision} trains only on a CUDA GPU with FP8 matrix units, not on the {device.type}",
            "run --precision bf16 here, or the FP8 points on a GPU (sm89 or newer)",
        )
    missing = torchao_missing()
    if missing is not None:
        return Fp8Unavailable(f"{precision}: {missing}", FIX)
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return Fp8Unavailable(
            f"{precision}: {name} (sm{capability[0]}{capability[1]}) has no FP8 matrix units (sm89 or newer)",
            "run --precision bf16 on this GPU, or the FP8 points on an Ada, Hopper or newer GPU",
        )
    return None


def float8_config(precision: str, *, emulate: bool = False):
    """torchao's recipe for `precision`; `from_recipe_name` alone sets the scaling (the bare
    `Float8LinearConfig(emulate=True)` would always be tensorwise)."""
    from torchao.float8 import Float8LinearConfig

    return dataclasses.replace(Float8LinearConfig.from_recipe_name(FP8_RECIPES[precision]), emulate=emulate)


def model_linears(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Every linear of the built model by module name, (out, in) from its weight."""
    return {
        name: (module.out_features, module.in_features)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }


def convert(model: nn.Module, precision: str, *, emulate: bool = False) -> Fp8Linears:
    """Swap the linears the filter picks for torchao's Float8Linear, in place; the record of
    which converted and why each other did not."""
    from torchao.float8 import convert_to_float8_training

    converted, kept = fp8_plan(precision, model_linears(model))
    chosen = frozenset(converted)
    convert_to_float8_training(
        model, config=float8_config(precision, emulate=emulate), module_filter_fn=lambda _, name: name in chosen
    )
    return Fp8Linears(recipe=FP8_RECIPES[precision], converted=converted, kept=kept)
