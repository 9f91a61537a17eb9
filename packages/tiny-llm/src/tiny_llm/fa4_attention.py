"""FlashAttention-4's causal attention (`flash-attn-4`, CuTe-DSL kernels for Hopper) as two
`torch.library` custom ops, so that torch.compile keeps it in one graph and the complete
update's CUDA graph captures it.

Called directly, `flash_attn_func` breaks dynamo's graph (its fake-mode check cannot be
traced); behind custom ops with fake implementations, dynamo treats each kernel as one opaque
call whose output shapes and strides it knows. The fakes promise contiguous outputs, and the
real ops return contiguous tensors, so inductor never reads a layout other than the one it
planned for.

Tensors are (batch, tokens, heads, head_dim), the layout the QKV projection produces; k and v
may have fewer heads than q (grouped-query attention: the kernel reads each kv head for its
group of query heads, nothing is repeated). A window (each query sees itself and the
window - 1 keys before it) is FA4's own `window_size_left`, so the kernel skips the blocks
outside it, forward and backward; a scale, where given, replaces 1/sqrt(head_dim). The optional `tiny-llm[fa4]` extra installs the
package; this module imports it only when an op first runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from throughput_schema import ModelConfig

# What the SM90 kernels take (flash_attn.cute.interface._validate_head_dims): 8-256, a multiple
# of 8 for BF16's 16-byte alignment.
HEAD_DIMS = range(8, 257, 8)


def unavailable(device: torch.device, head_dim: int) -> str | None:
    """Why FA4 cannot run here (one line), or None where it can."""
    if device.type != "cuda":
        return f"Kernels(attention='fa4') needs a CUDA GPU, not {device.type}"
    if not torch.cuda.is_available():
        return "Kernels(attention='fa4') needs a CUDA GPU, and none is available here"
    major, minor = torch.cuda.get_device_capability(device)
    if major != 9:
        return (
            f"Kernels(attention='fa4') runs FlashAttention-4's Hopper kernels (compute capability 9.x); "
            f"this GPU is {major}.{minor}: use attention=auto or sdpa"
        )
    if head_dim not in HEAD_DIMS:
        return (
            f"Kernels(attention='fa4') takes head_dim 8-256 in steps of 8, not {head_dim}: use attention=auto or sdpa"
        )
    try:
        import flash_attn.cute.interface  # noqa: F401
    except ImportError as exc:
        return (
            f"Kernels(attention='fa4') needs flash-attn-4, which does not import here ({exc}): "
            "install tiny-llm's fa4 extra (uv sync --extra fa4)"
        )
    return None


# "auto" picks FA4 from this context up: the update was faster with FA4 at every context
# measured from here, and shorter ones were not measured, so "auto" keeps PyTorch's SDPA choice
# there. Small batches gain too, so the rule reads the context alone and every batch of one curve
# runs the same kernel (docs/performance.md).
FA4_MIN_CONTEXT = 512


def resolve_attention(choice: str, device: torch.device, cfg: ModelConfig) -> str:
    """`Kernels.attention` as it runs for this model on `device`: "auto" is "fa4" on a Hopper GPU
    where flash-attn-4 imports, for a head size it takes and a context of at least
    `FA4_MIN_CONTEXT`, else "sdpa" (PyTorch's choice among its SDPA kernels, cuDNN on Hopper)."""
    if choice != "auto":
        return choice
    if cfg.context_length < FA4_MIN_CONTEXT:
        return "sdpa"
    return "sdpa" if unavailable(torch.device(device), cfg.head_dim) is not None else "fa4"


def _options(window: int | None, scale: float | None) -> dict:
    """FA4's keyword arguments for a window and a scale; none where neither is set, so a model
    without them calls the kernel exactly as before. window_size_left counts the keys before
    the query's own."""
    window_args = {} if window is None else {"window_size_left": window - 1, "window_size_right": 0}
    return window_args | ({} if scale is None else {"softmax_scale": scale})


@torch.library.custom_op("tiny_llm::fa4_forward", mutates_args=())
def fa4_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention's output (B, T, H, D) and its log-sum-exp (B, H, T) in FP32."""
    return _forward(q, k, v, window, scale)


def _forward(q, k, v, window: int | None, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_fwd

    out, lse, *_ = _flash_attn_fwd(q, k, v, causal=True, return_lse=True, **_options(window, scale))
    return out.contiguous(), lse.contiguous()


@fa4_forward.register_fake
def _fa4_forward_fake(q, k, v, window=None, scale=None) -> tuple[torch.Tensor, torch.Tensor]:
    B, T, H, _ = q.shape
    return q.new_empty((B, T, H, v.shape[-1])), q.new_empty((B, H, T), dtype=torch.float32)


@torch.library.custom_op("tiny_llm::fa4_backward", mutates_args=())
def fa4_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    window: int | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of causal attention, from the forward's inputs, output and log-sum-exp."""
    return _backward_kernel(dout, q, k, v, out, lse, window, scale)


def _backward_kernel(dout, q, k, v, out, lse, window, scale) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_bwd

    dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, causal=True, **_options(window, scale))[:3]
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


@fa4_backward.register_fake
def _fa4_backward_fake(dout, q, k, v, out, lse, window=None, scale=None) -> tuple[torch.Tensor, ...]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, ctx.window, ctx.scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)


def _backward(ctx, dout: torch.Tensor, _dlse: torch.Tensor | None):
    # The log-sum-exp is an output only for the backward's sake; nothing downstream uses it.
    q, k, v, out, lse = ctx.saved_tensors
    return *fa4_backward(dout, q, k, v, out, lse, ctx.window, ctx.scale), None, None


fa4_forward.register_autograd(_backward, setup_context=_setup_context)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None, scale: float | None = None
) -> torch.Tensor:
    """Causal attention of (B, T, H, D) q and (B, T, H_kv, D) k, v: (B, T, H, D), within
    `window` keys where given."""
    return fa4_forward(q, k, v, window, scale)[0]


# Kernels(attention="fa4", rope="triton"): RoPE and attention as one pair of ops over the QKV
# projection's output. Forward, `tiny_llm.triton_rope` writes q and k rotated in FA4's layout and
# the kernel reads v in place; backward, FA4's dq, dk and dv go through one Triton pass that
# rotates dq and dk back and writes d(qkv) whole, where inductor's fused RoPE backward gathers
# them at well under copy speed (docs/performance.md).


def _v(qkv: torch.Tensor, n_heads: int, n_kv: int) -> torch.Tensor:
    """v, (B, T, H_kv, D), as a strided view of the (B, T, (H+2·H_kv)·D) projection."""
    head_dim = qkv.shape[-1] // (n_heads + 2 * n_kv)
    return qkv.narrow(-1, (n_heads + n_kv) * head_dim, n_kv * head_dim).unflatten(-1, (n_kv, head_dim))


@torch.library.custom_op("tiny_llm::fa4_rope_forward", mutates_args=())
def fa4_rope_forward(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    n_kv: int,
    window: int | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Causal attention's output (B, T, H, D), its log-sum-exp, and the rotated q and k the
    backward reads, from the (B, T, (H+2·H_kv)·D) projection and the (T, D) FP32 tables."""
    from tiny_llm.triton_rope import qk_rope_bthd

    q, k = qk_rope_bthd(qkv, cos, sin, n_heads, n_kv)
    out, lse = _forward(q, k, _v(qkv, n_heads, n_kv), window, scale)
    return out, lse, q, k


@fa4_rope_forward.register_fake
def _fa4_rope_forward_fake(qkv, cos, sin, n_heads, n_kv, window=None, scale=None):
    B, T, width = qkv.shape
    q = qkv.new_empty((B, T, n_heads, width // (n_heads + 2 * n_kv)))
    k = qkv.new_empty((B, T, n_kv, q.shape[-1]))
    return q.new_empty(q.shape), q.new_empty((B, n_heads, T), dtype=torch.float32), q, k


@torch.library.custom_op("tiny_llm::fa4_rope_backward", mutates_args=())
def fa4_rope_backward(
    dout: torch.Tensor,
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    n_heads: int,
    n_kv: int,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """d(qkv) in the projection's layout."""
    from tiny_llm.triton_rope import qkv_grad

    dq, dk, dv = _backward_kernel(dout, q, k, _v(qkv, n_heads, n_kv), out, lse, window, scale)
    return qkv_grad(dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), cos, sin, qkv.dtype)


@fa4_rope_backward.register_fake
def _fa4_rope_backward_fake(dout, qkv, cos, sin, q, k, out, lse, n_heads, n_kv, window=None, scale=None):
    return qkv.new_empty(qkv.shape)


def _rope_setup_context(ctx, inputs, output) -> None:
    qkv, cos, sin, ctx.n_heads, ctx.n_kv, ctx.window, ctx.scale = inputs
    out, lse, q, k = output
    # Only the output flows on; without this autograd would fill zero gradients for the rest.
    ctx.mark_non_differentiable(lse, q, k)
    ctx.save_for_backward(qkv, cos, sin, q, k, out, lse)


def _rope_backward(ctx, dout, _dlse, _dq, _dk):
    qkv, cos, sin, q, k, out, lse = ctx.saved_tensors
    dqkv = fa4_rope_backward(dout, qkv, cos, sin, q, k, out, lse, ctx.n_heads, ctx.n_kv, ctx.window, ctx.scale)
    return dqkv, None, None, None, None, None, None


fa4_rope_forward.register_autograd(_rope_backward, setup_context=_rope_setup_context)


def rope_attention(qkv, cos, sin, n_heads: int, n_kv: int, window: int | None = None, scale: float | None = None):
    """Causal attention of q, k and v from the (B, T, (H+2·H_kv)·D) projection, q and k rotated by
    the (T, D) FP32 tables: (B, T, H, D), within `window` keys where given."""
    return fa4_rope_forward(qkv, cos, sin, n_heads, n_kv, window, scale)[0]
