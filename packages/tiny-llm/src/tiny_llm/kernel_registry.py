"""The kernel registry: the implementation behind each `tiny_llm.kernels.Kernels` choice that
is not the model's own PyTorch code, and what each "auto" resolves to for a model on a
device. `tiny_llm.model` asks it what to build; the choices themselves, and which model a
kernel cannot build (`unsupported`), are `tiny_llm.kernels`'.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace

import torch

from throughput_schema import ModelConfig
from tiny_llm.kernels import Kernels, unsupported

# The Triton kernel behind each `Kernels(<field>="triton")`: (module, function).
TRITON = {
    "swiglu": ("tiny_llm.triton_swiglu", "swiglu"),
    "cross_entropy": ("tiny_llm.triton_cross_entropy", "linear_cross_entropy"),
    "norm": ("tiny_llm.triton_norm", "add_rms_norm"),
    "rope": ("tiny_llm.triton_rope", "qkv_rope"),
}


def load_triton(field: str, device: torch.device, cfg: ModelConfig | None = None):
    """The function behind `Kernels(<field>="triton")` (`TRITON`), or a one-line error where it
    cannot run: on this device, or (`tiny_llm.kernels.unsupported`) for this model's shape."""
    reason = unsupported(field, cfg) if cfg is not None else None
    if reason is not None:
        raise ValueError(reason)
    # The Triton interpreter (TRITON_INTERPRET=1) runs the kernels on the CPU, as the CPU tests do.
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(f"Kernels({field}='triton') needs a CUDA device (or TRITON_INTERPRET=1 on the CPU)")
    module, name = TRITON[field]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise RuntimeError(f"Kernels({field}='triton') needs triton, which does not import here: {exc}") from None


def load_fa4(device: torch.device, cfg: ModelConfig, rope: str = "default"):
    """FlashAttention-4's causal attention (`tiny_llm.fa4_attention`): of q, k and v, or with
    rope="triton" of the QKV projection's output (RoPE fused in); a one-line error where it
    cannot run here."""
    from tiny_llm.fa4_attention import attention, rope_attention, unavailable

    reason = unavailable(torch.device(device), cfg.head_dim)
    if reason is not None:
        raise RuntimeError(reason)
    if rope == "triton":
        load_triton("rope", device, cfg)  # its one-line refusals: the shape, the device, triton
        return rope_attention
    return attention


def triton_imports() -> bool:
    """Whether the Triton SwiGLU (and so triton) imports here."""
    try:
        import tiny_llm.triton_swiglu  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_swiglu(choice: str, device: torch.device, cfg: ModelConfig | None = None) -> str:
    """`Kernels.swiglu` as it runs on `device`: "auto" is "triton" on CUDA where triton
    imports and the kernel takes this model's MLP (`unsupported`), else "default" (the CPU,
    including under TRITON_INTERPRET=1, keeps "default")."""
    if choice != "auto":
        return choice
    if cfg is not None and unsupported("swiglu", cfg) is not None:
        return "default"
    return "triton" if torch.device(device).type == "cuda" and triton_imports() else "default"


def resolve_rope(choice: str, attention: str, device: torch.device, cfg: ModelConfig) -> str:
    """`Kernels.rope` as it runs beside the resolved `attention`: "auto" is "triton" beside FA4
    where the kernel takes this model's shape (any kv heads, no q/k norm) and triton imports,
    else "default": beside FA4 the fused pair was faster and equal at every point measured
    (docs/performance.md)."""
    if choice != "auto":
        return choice
    if attention != "fa4" or unsupported("rope", cfg) is not None:
        return "default"
    return "triton" if torch.device(device).type == "cuda" and triton_imports() else "default"


def resolve_kernels(kernels: Kernels, device: torch.device, cfg: ModelConfig) -> Kernels:
    """`kernels` with every "auto" resolved as it runs for this model on `device`: the attention
    (`tiny_llm.fa4_attention.resolve_attention`), RoPE (`resolve_rope`), SwiGLU (`resolve_swiglu`)
    and optimizer (`tiny_llm.arena_adamw.default_kernel`, for the FP32 arenas the update builds)
    kernels."""
    from tiny_llm.arena_adamw import default_kernel
    from tiny_llm.fa4_attention import resolve_attention

    device = torch.device(device)
    attention = resolve_attention(kernels.attention, device, cfg)
    return replace(
        kernels,
        attention=attention,
        rope=resolve_rope(kernels.rope, attention, device, cfg),
        swiglu=resolve_swiglu(kernels.swiglu, device, cfg),
        optimizer=default_kernel(device, torch.float32) if kernels.optimizer == "auto" else kernels.optimizer,
    )
