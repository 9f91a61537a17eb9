"""The "triton" RoPE (`Kernels.rope`): q and k rotated straight from the QKV projection.

Compiled, the default path (`qkv.view(...).unbind(2)`, then `apply_rope` on q and k) has
a backward that rotates dq and dk back and `stack`s them with dv into d(qkv), reading the
gradients through a transpose; on the H200 it ran at about half the copy speed
(benchmarks/results/h200-20261130-elementwise). Here one Function takes the projection's
output and returns q and k rotated and v (a view of it, as unbind gives), and its backward
writes d(qkv) in one pass, whatever strides attention's backward gave dq, dk and dv.

A program handles BLOCK_T tokens of one head: the cos/sin rows are loaded once for q and
k, and each token's head is a contiguous run of D elements in every tensor read or written.
The tables come from `tiny_llm.model.rope_tables`, whose rows repeat their first half (the
"rotate half" layout pairs element i with i + D/2 at one angle), so only that half is read:
each program reads its rows again (from L2), and full FP32 rows would be twice the bytes of
its q and k.

The arithmetic is `tiny_llm.model.apply_rope`'s (FP32), rounded once to the input's dtype.
Plain Triton calls inside a `torch.autograd.Function`, as in `tiny_llm.triton_swiglu`
(compiled and captured alike).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# At head_dim 64: 64 tokens x 64 dims x (q, k), 8192 elements in and out per program at 4 warps.
BLOCK_T = 64
NUM_WARPS = 4


@triton.jit
def _rows(T, BLOCK_T: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    return t[:, None], tl.arange(0, HALF)[None, :], (t < T)[:, None]


@triton.jit
def _tables(cos, sin, t, j, mask, HALF: tl.constexpr):
    return tl.load(cos + t * (2 * HALF) + j, mask=mask), tl.load(sin + t * (2 * HALF) + j, mask=mask)


@triton.jit
def _rope_forward(qkv, cos, sin, out, T, H, BLOCK_T: tl.constexpr, HALF: tl.constexpr):
    t, j, mask = _rows(T, BLOCK_T, HALF)
    # int64 (b): offsets into B·T·3·H·D elements pass 2**31 at large batches.
    b, h = (tl.program_id(1) // H).to(tl.int64), tl.program_id(1) % H
    c, s = _tables(cos, sin, t, j, mask, HALF)
    token = b * T + t
    for slot in tl.static_range(2):  # q, then k
        src = qkv + (token * 3 + slot) * H * (2 * HALF) + h * (2 * HALF) + j
        x1 = tl.load(src, mask=mask).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask).to(tl.float32)
        # x·cos + rotate_half(x)·sin, with rotate_half(x) = (-x2, x1)
        y1 = x1 * c - x2 * s
        y2 = x2 * c + x1 * s
        dst = out + (token * 2 + slot) * H * (2 * HALF) + h * (2 * HALF) + j
        tl.store(dst, y1.to(out.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, y2.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _unrotate(grad, sb, sh, st, b, h, t, j, mask, c, s, dst, HALF: tl.constexpr):
    src = grad + b * sb + h * sh + t * st + j
    g1 = tl.load(src, mask=mask).to(tl.float32)
    g2 = tl.load(src + HALF, mask=mask).to(tl.float32)
    # The transpose of the forward rotation y1 = x1·c - x2·s, y2 = x2·c + x1·s.
    tl.store(dst, (g1 * c + g2 * s).to(dst.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (g2 * c - g1 * s).to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _rope_backward(dq, q_sb, q_sh, q_st, dk, k_sb, k_sh, k_st, dv, v_sb, v_sh, v_st, cos, sin, d_qkv, T, H,
                   BLOCK_T: tl.constexpr, HALF: tl.constexpr):
    t, j, mask = _rows(T, BLOCK_T, HALF)
    b, h = (tl.program_id(1) // H).to(tl.int64), tl.program_id(1) % H
    c, s = _tables(cos, sin, t, j, mask, HALF)
    dst = d_qkv + (b * T + t) * 3 * H * (2 * HALF) + h * (2 * HALF) + j
    _unrotate(dq, q_sb, q_sh, q_st, b, h, t, j, mask, c, s, dst, HALF)
    _unrotate(dk, k_sb, k_sh, k_st, b, h, t, j, mask, c, s, dst + H * (2 * HALF), HALF)
    # v was not rotated: dv goes to its slot as it is.
    src = dv + b * v_sb + h * v_sh + t * v_st + j
    dst += 2 * H * (2 * HALF)
    tl.store(dst, tl.load(src, mask=mask).to(dst.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, tl.load(src + HALF, mask=mask).to(dst.dtype.element_ty), mask=mask)


def _strides(grad: torch.Tensor) -> tuple:
    """A (B, H, T, D) gradient with unit stride along D, and its B, H and T strides."""
    grad = grad if grad.stride(-1) == 1 else grad.contiguous()
    return grad, *grad.stride()[:3]


class _RoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int):
        B, T, width = qkv.shape
        D = width // (3 * n_heads)
        qkv, cos, sin = qkv.contiguous(), cos.contiguous(), sin.contiguous()
        out = qkv.new_empty(B, T, 2, n_heads, D)
        _rope_forward[(triton.cdiv(T, BLOCK_T), B * n_heads)](qkv, cos, sin, out, T, n_heads, BLOCK_T=BLOCK_T,
                                                             HALF=D // 2, num_warps=NUM_WARPS)
        ctx.save_for_backward(cos, sin)
        ctx.n_heads = n_heads
        v = qkv.view(B, T, 3, n_heads, D)[:, :, 2]
        # (B, H, T, D) views, the layout the default path gives attention.
        return out[:, :, 0].transpose(1, 2), out[:, :, 1].transpose(1, 2), v.transpose(1, 2)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor):
        cos, sin = ctx.saved_tensors
        B, H, T, D = dq.shape
        d_qkv = dq.new_empty(B, T, 3 * H * D)
        _rope_backward[(triton.cdiv(T, BLOCK_T), B * H)](*_strides(dq), *_strides(dk), *_strides(dv), cos, sin,
                                                         d_qkv, T, H, BLOCK_T=BLOCK_T, HALF=D // 2,
                                                         num_warps=NUM_WARPS)
        return d_qkv, None, None, None


def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int):
    """q and k rotated, and v, as (B, H, T, D), from the QKV projection's output (B, T, 3·H·D).

    Equal to `qkv.view(B, T, 3, H, D).unbind(2)`, transposed, then `apply_rope` on q and k,
    for FP32 cos/sin tables of shape (T, D) from `rope_tables` (rows that repeat their first half).
    """
    half = qkv.shape[-1] // (3 * n_heads) // 2
    if half < 1 or half & (half - 1) or qkv.shape[-1] != 6 * n_heads * half:
        raise ValueError(f"rope_qkv: head_dim must be a power of two >= 2, got {qkv.shape[-1] / (3 * n_heads)}")
    return _RoPE.apply(qkv, cos, sin, n_heads)
