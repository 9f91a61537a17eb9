"""The "triton" RoPE (`Kernels.rope`): q and k rotated straight from the QKV projection's
output, and d(qkv) written in that projection's layout, each in one pass.

Compiled, inductor turns the default (`unbind` of the (B, T, 3, H, D) projection, then
`apply_rope` on q and k) into a backward kernel that rotates dq and dk back and stacks them
with dv into d(qkv) at well under copy speed (docs/performance.md). Here the backward reads
dq, dk and dv once, in
whatever strides attention's backward gave them, and writes d(qkv) whole: the stack is the
store. The forward reads q, k and v from the projection and writes them, q and k rotated,
each as a dense (B, H, T, D) tensor: compiled, attention's inputs are copied into that layout
first where they are not in it, so (B, T, H, D) views would cost one copy of each.

A row is one (token, query head) pair: its D values, read as the two halves the rotate-half
layout pairs. With fewer kv heads (grouped-query attention) the first `kv_heads` rows of each
token also carry k and v; the projection's output is (B, T, (H + 2·H_kv)·D), q's heads first.
The rotation is the eager one, `x * cos + cat(-x2, x1) * sin`, in FP32 over the FP32 tables and
rounded once to the input's dtype; its backward is the transposed rotation
(dx1 = dy1 cos1 + dy2 sin2, dx2 = dy2 cos2 - dy1 sin1), also FP32 rounded once.

Plain Triton calls inside a `torch.autograd.Function`, as `tiny_llm.triton_swiglu`: dynamo
traces them, so the compiled forward and backward launch them and the update's CUDA graph
replays them. Importing this module needs triton; the model imports it only for
`Kernels(rope="triton")` (`tiny_llm.kernel_registry.load_triton`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# 64 rows x 64 values (two halves of 32) per tile at head_dim 64: 4096 elements per tensor,
# 32 per thread at 4 warps; each half row is 64 contiguous bytes in BF16.
BLOCK_ROWS = 64
NUM_WARPS = 4


@triton.jit
def _rows(n_rows, n_heads, context, BLOCK_ROWS: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_HALF)
    mask = (rows < n_rows)[:, None] & (cols < HALF)[None, :]
    # int64: B x T x 3 x H x D passes 2**31 elements at large batches.
    token = rows.to(tl.int64) // n_heads
    head = rows.to(tl.int64) - token * n_heads
    return token, head, token % context, cols[None, :], mask


@triton.jit
def _tables(cos, sin, pos, cols, mask, HALF: tl.constexpr):
    at = pos[:, None] * (2 * HALF) + cols
    c1, c2 = tl.load(cos + at, mask=mask), tl.load(cos + at + HALF, mask=mask)
    s1, s2 = tl.load(sin + at, mask=mask), tl.load(sin + at + HALF, mask=mask)
    return c1, c2, s1, s2


@triton.jit
def _rotate(src, dst, c1, c2, s1, s2, mask, HALF: tl.constexpr, BACK: tl.constexpr):
    """One tensor's rows rotated by +angle (the forward) or -angle (BACK), FP32 rounded once."""
    x1 = tl.load(src, mask=mask).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask).to(tl.float32)
    if BACK:
        y1, y2 = x1 * c1 + x2 * s2, x2 * c2 - x1 * s1
    else:
        y1, y2 = x1 * c1 - x2 * s1, x2 * c2 + x1 * s2
    tl.store(dst, y1.to(dst.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, y2.to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _rope_forward(
    qkv,
    cos,
    sin,
    q_out,
    k_out,
    v_out,
    n_rows,
    n_heads,
    kv_heads,
    context,
    q_sb,
    q_sh,
    q_st,
    k_sb,
    k_sh,
    k_st,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    COPY_V: tl.constexpr,
):
    token, head, pos, cols, mask = _rows(n_rows, n_heads, context, BLOCK_ROWS, HALF, BLOCK_HALF)
    c1, c2, s1, s2 = _tables(cos, sin, pos, cols, mask, HALF)
    kv = mask & (head < kv_heads)[:, None]
    src = qkv + (token * ((n_heads + 2 * kv_heads) * 2 * HALF) + head * (2 * HALF))[:, None] + cols
    k_src, v_src = src + n_heads * 2 * HALF, src + (n_heads + kv_heads) * 2 * HALF
    # The outputs' strides: dense (B, H, T, D) for SDPA (else compiled attention copies each of
    # q, k and v there first), dense (B, T, H, D) for FlashAttention-4, which reads v in place.
    batch = token // context
    q_dst = (batch * q_sb + head * q_sh + pos * q_st)[:, None] + cols
    k_dst = (batch * k_sb + head * k_sh + pos * k_st)[:, None] + cols
    _rotate(src, q_out + q_dst, c1, c2, s1, s2, mask, HALF, False)
    _rotate(k_src, k_out + k_dst, c1, c2, s1, s2, kv, HALF, False)
    if COPY_V:  # v has k's shape and strides
        tl.store(v_out + k_dst, tl.load(v_src, mask=kv), mask=kv)
        tl.store(v_out + k_dst + HALF, tl.load(v_src + HALF, mask=kv), mask=kv)


@triton.jit
def _rope_backward(
    dq,
    dk,
    dv,
    cos,
    sin,
    d_qkv,
    n_rows,
    n_heads,
    kv_heads,
    context,
    q_sb,
    q_sh,
    q_st,
    k_sb,
    k_sh,
    k_st,
    v_sb,
    v_sh,
    v_st,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
):
    token, head, pos, cols, mask = _rows(n_rows, n_heads, context, BLOCK_ROWS, HALF, BLOCK_HALF)
    c1, c2, s1, s2 = _tables(cos, sin, pos, cols, mask, HALF)
    kv = mask & (head < kv_heads)[:, None]
    batch = token // context
    dst = d_qkv + (token * ((n_heads + 2 * kv_heads) * 2 * HALF) + head * (2 * HALF))[:, None] + cols
    k_dst, v_dst = dst + n_heads * 2 * HALF, dst + (n_heads + kv_heads) * 2 * HALF
    _rotate(dq + (batch * q_sb + head * q_sh + pos * q_st)[:, None] + cols, dst, c1, c2, s1, s2, mask, HALF, True)
    _rotate(dk + (batch * k_sb + head * k_sh + pos * k_st)[:, None] + cols, k_dst, c1, c2, s1, s2, kv, HALF, True)
    src = dv + (batch * v_sb + head * v_sh + pos * v_st)[:, None] + cols
    out_dtype = d_qkv.dtype.element_ty
    tl.store(v_dst, tl.load(src, mask=kv).to(out_dtype), mask=kv)
    tl.store(v_dst + HALF, tl.load(src + HALF, mask=kv).to(out_dtype), mask=kv)


def _launch_args(n_rows: int, head_dim: int) -> tuple[tuple[int], dict]:
    half = head_dim // 2
    return (triton.cdiv(n_rows, BLOCK_ROWS),), dict(
        HALF=half, BLOCK_HALF=triton.next_power_of_2(half), BLOCK_ROWS=BLOCK_ROWS, num_warps=NUM_WARPS
    )


def _strides(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """(B, H, T, D) with unit stride along D (copied only where it is not), and its other strides."""
    t = t if t.stride(-1) == 1 else t.contiguous()
    return t, (t.stride(0), t.stride(1), t.stride(2))


def _rotated(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, n_kv: int, heads_first: bool):
    """q and k rotated, and v copied where `heads_first` (else None), from the (B, T, (H+2·H_kv)·D)
    projection: dense (B, H, T, D) tensors (k and v with H_kv heads) where `heads_first`, else
    dense (B, T, H, D)."""
    B, T, width = qkv.shape
    head_dim = width // (n_heads + 2 * n_kv)
    qkv = qkv.contiguous()
    q_shape, k_shape = ((B, h, T, head_dim) if heads_first else (B, T, h, head_dim) for h in (n_heads, n_kv))
    q, k = qkv.new_empty(q_shape), qkv.new_empty(k_shape)
    v = qkv.new_empty(k_shape) if heads_first else None
    q_s, k_s = ((t if heads_first else t.transpose(1, 2)).stride()[:3] for t in (q, k))  # as (B, H, T, D)
    grid, meta = _launch_args(B * T * n_heads, head_dim)
    _rope_forward[grid](
        qkv,
        cos,
        sin,
        q,
        k,
        k if v is None else v,
        B * T * n_heads,
        n_heads,
        n_kv,
        T,
        *q_s,
        *k_s,
        COPY_V=heads_first,
        **meta,
    )
    return q, k, v


def qkv_grad(dq, dk, dv, cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """d(qkv) in the projection's (B, T, (H+2·H_kv)·D) layout from dq, dk and dv viewed as
    (B, H, T, D) and (B, H_kv, T, D) (any strides): dq and dk rotated back, dv copied, in one pass."""
    B, n_heads, T, head_dim = dq.shape
    n_kv = dk.shape[1]
    (dq, q_s), (dk, k_s), (dv, v_s) = _strides(dq), _strides(dk), _strides(dv)
    d_qkv = dq.new_empty(B, T, (n_heads + 2 * n_kv) * head_dim, dtype=dtype)
    grid, meta = _launch_args(B * T * n_heads, head_dim)
    _rope_backward[grid](dq, dk, dv, cos, sin, d_qkv, B * T * n_heads, n_heads, n_kv, T, *q_s, *k_s, *v_s, **meta)
    return d_qkv


class _QKVRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, n_kv: int):
        ctx.save_for_backward(cos, sin)
        ctx.dtype = qkv.dtype
        return _rotated(qkv, cos, sin, n_heads, n_kv, heads_first=True)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return qkv_grad(dq, dk, dv, cos, sin, ctx.dtype), None, None, None, None


def check_tables(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, n_kv: int) -> None:
    """A one-line error where the heads, the projection's width or the (T, D) FP32 tables do not fit."""
    B, T, width = qkv.shape
    if n_kv < 1 or n_heads % n_kv:
        raise ValueError(f"qkv_rope: {n_kv} kv heads do not divide {n_heads} heads")
    head_dim, odd = divmod(width, n_heads + 2 * n_kv)
    if odd or head_dim % 2:
        raise ValueError(f"qkv_rope: width {width} is not ({n_heads} + 2 x {n_kv}) heads x an even head_dim")
    for table in (cos, sin):
        if table.shape != (T, head_dim) or table.dtype != torch.float32:
            raise ValueError(f"qkv_rope: the tables must be FP32 (T, D), got {tuple(table.shape)} {table.dtype}")


def qkv_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, kv_heads: int):
    """q, k and v, each a dense (B, heads, T, D) tensor, from the projection's (B, T, (H+2·H_kv)·D)
    output: q and k rotated by the (T, D) FP32 tables as `tiny_llm.model.apply_rope` rotates them."""
    check_tables(qkv, cos, sin, n_heads, kv_heads)
    return _QKVRope.apply(qkv, cos.contiguous(), sin.contiguous(), n_heads, kv_heads)


def qk_rope_bthd(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, kv_heads: int):
    """q and k rotated, each a dense (B, T, heads, D) tensor (FlashAttention-4's layout), from the
    projection's output; no autograd (`tiny_llm.fa4_attention`'s fused op owns the backward,
    `qkv_grad` with dq, dk and dv transposed to (B, heads, T, D) views)."""
    check_tables(qkv, cos, sin, n_heads, kv_heads)
    q, k, _ = _rotated(qkv, cos.contiguous(), sin.contiguous(), n_heads, kv_heads, heads_first=False)
    return q, k
