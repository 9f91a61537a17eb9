"""The "triton" norm (`Kernels.norm`): the residual add, RMSNorm and the cast, one pass each way.

The default block is `x = x + f(norm(x))` with an FP32 residual stream `x` and a BF16 `f`
(autocast). Compiled, inductor fuses the add into the next norm's forward, but its backward
splits the weight's gradient (a reduction over tokens) into kernels far below copy speed
(docs/performance.md). Here one forward pass reads the residual and the
sublayer's output, writes the new residual (FP32) and the normed activations in the autocast
dtype; one backward pass reads the residual, the normed activations' gradient and the
incoming residual gradient, writes the residual's gradient (FP32) and the sublayer output's
(its dtype), and sums the weight's gradient into one row per program (the per-program rows
are summed afterwards: deterministic, no float atomics).

Arithmetic is FP32, as `F.rms_norm` computes on the FP32 residual: x * rsqrt(mean(x^2) + eps)
* weight, rounded once to the output dtype. Plain Triton calls inside `torch.autograd.Function`s,
as `tiny_llm.triton_swiglu` does, so the compiled update launches them and the CUDA graph
replays them. Importing this module needs triton; the model imports it only for
`Kernels(norm="triton")` (`tiny_llm.kernel_registry.load_triton`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# At most about 4096 elements per tile (several rows of d_model), 16 per thread at 8 warps;
# fewer rows per tile where that leaves under PROGRAMS programs (20m at batch 1: 512 tokens).
TILE = 4096
PROGRAMS = 264  # two per multiprocessor of the H200
# Programs of the backward; each sums its rows' weight gradient into one FP32 row, so this
# bounds the partial rows summed afterwards (512 x 1280 x 4 B = 2.6 MB at 500m).
MAX_PROGRAMS = 512


@triton.jit
def _rows(start, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = start + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # int64 offsets: tokens x d_model passes 2**31 at large batches.
    return rows.to(tl.int64)[:, None] * n_cols + cols[None, :], mask


@triton.jit
def _add_norm_forward(
    res,
    delta,
    weight,
    res_out,
    h,
    n_rows,
    n_cols,
    eps,
    HAS_DELTA: tl.constexpr,
    STORE_RES: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    eps = tl.cast(eps, tl.float32)  # see _add_norm_backward
    offs, mask = _rows(tl.program_id(0) * BLOCK_ROWS, n_rows, n_cols, BLOCK_ROWS, BLOCK_COLS)
    x = tl.load(res + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_DELTA:
        x += tl.load(delta + offs, mask=mask, other=0.0).to(tl.float32)
    if STORE_RES:
        tl.store(res_out + offs, x.to(res_out.dtype.element_ty), mask=mask)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    cols = tl.arange(0, BLOCK_COLS)
    w = tl.load(weight + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(h + offs, (x * rstd[:, None] * w[None, :]).to(h.dtype.element_ty), mask=mask)


@triton.jit
def _add_norm_backward(
    x_saved,
    weight,
    dh,
    dres,
    dx_out,
    ddelta,
    dw_rows,
    n_rows,
    n_cols,
    rows_per_program,
    eps,
    HAS_DRES: tl.constexpr,
    STORE_DDELTA: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    # torch.compile passes a Python float to a user kernel as fp64 (torch 2.11 on the H200): in
    # FP64 the norm's arithmetic would promote to it and the loop-carried FP32 `dw` not compile.
    eps = tl.cast(eps, tl.float32)
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    w = tl.load(weight + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    first = pid * rows_per_program
    for start in range(first, tl.minimum(first + rows_per_program, n_rows), BLOCK_ROWS):
        offs, mask = _rows(start, n_rows, n_cols, BLOCK_ROWS, BLOCK_COLS)
        x = tl.load(x_saved + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(dh + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        xhat = x * rstd[:, None]
        gw = g * w[None, :]
        # d/dx of x·rstd·w: rstd·(g·w - xhat·mean(g·w·xhat)); masked rows and columns are zero.
        dx = (gw - xhat * (tl.sum(gw * xhat, axis=1) / n_cols)[:, None]) * rstd[:, None]
        if HAS_DRES:
            dx += tl.load(dres + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_out + offs, dx.to(dx_out.dtype.element_ty), mask=mask)
        if STORE_DDELTA:
            tl.store(ddelta + offs, dx.to(ddelta.dtype.element_ty), mask=mask)
        dw += tl.sum(g * xhat, axis=0)
    tl.store(dw_rows + pid * n_cols + cols, dw, mask=cols < n_cols)


# Plain Python rather than triton's helpers: dynamo traces these inside the Functions.
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _blocks(n_rows: int, n_cols: int) -> dict[str, int]:
    """The launch's BLOCK_ROWS, BLOCK_COLS and num_warps for `n_rows` rows of `n_cols` elements."""
    block_cols = _pow2(n_cols)
    block_rows = max(1, min(TILE // block_cols, _pow2(_cdiv(n_rows, PROGRAMS))))
    return {
        "BLOCK_ROWS": block_rows,
        "BLOCK_COLS": block_cols,
        "num_warps": 8 if block_rows * block_cols >= TILE else 4,
    }


def _forward(res, delta, weight, eps: float, out_dtype: torch.dtype, store_res: bool):
    res = res.contiguous()
    n_cols = res.shape[-1]
    n_rows = res.numel() // n_cols
    blocks = _blocks(n_rows, n_cols)
    res_out = torch.empty_like(res) if store_res else None
    h = torch.empty(res.shape, dtype=out_dtype, device=res.device)
    # An unused pointer gets `weight`, which no kernel writes: a written tensor passed twice
    # would alias two of the kernel's arguments for torch.compile's mutation analysis.
    _add_norm_forward[(_cdiv(n_rows, blocks["BLOCK_ROWS"]),)](
        res,
        weight if delta is None else delta.contiguous(),
        weight,
        weight if res_out is None else res_out,
        h,
        n_rows,
        n_cols,
        eps,
        HAS_DELTA=delta is not None,
        STORE_RES=store_res,
        **blocks,
    )
    return (res if res_out is None else res_out), h


def _backward(x, weight, dh, dres, eps: float, res_dtype: torch.dtype, delta_dtype: torch.dtype | None):
    """(d residual in `res_dtype`, d delta in `delta_dtype` or None, d weight)."""
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    blocks = _blocks(n_rows, n_cols)
    tiles = _cdiv(n_rows, blocks["BLOCK_ROWS"])
    per_program = _cdiv(tiles, min(tiles, MAX_PROGRAMS)) * blocks["BLOCK_ROWS"]
    programs = _cdiv(n_rows, per_program)
    dx = torch.empty(x.shape, dtype=res_dtype, device=x.device)
    # The sublayer's output has its own dtype (BF16 under autocast): a second, rounded copy
    # (a copy too where the dtypes agree: one tensor handed to two inputs' gradients could be
    # accumulated into in place).
    store_ddelta = delta_dtype is not None
    ddelta = torch.empty(x.shape, dtype=delta_dtype, device=x.device) if store_ddelta else None
    dw_rows = torch.empty(programs, n_cols, dtype=torch.float32, device=x.device)
    dh = dh.contiguous()
    _add_norm_backward[(programs,)](  # unused pointers get `dh`, which it only reads (see _forward)
        x,
        weight,
        dh,
        dh if dres is None else dres.contiguous(),
        dx,
        dh if ddelta is None else ddelta,
        dw_rows,
        n_rows,
        n_cols,
        per_program,
        eps,
        HAS_DRES=dres is not None,
        STORE_DDELTA=store_ddelta,
        **blocks,
    )
    return dx, ddelta, dw_rows.sum(0).to(weight.dtype)


class _Norm(torch.autograd.Function):
    """h = rms_norm(x) * weight in `out_dtype` (the first block's norm: no add)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
        x = x.contiguous()
        _, h = _forward(x, None, weight, eps, out_dtype, store_res=False)
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return h

    @staticmethod
    def backward(ctx, dh: torch.Tensor):
        x, weight = ctx.saved_tensors
        dx, _, dw = _backward(x, weight, dh, None, ctx.eps, x.dtype, None)
        return dx, dw, None, None


class _AddNorm(torch.autograd.Function):
    """res + delta, and rms_norm(res + delta) * weight in `out_dtype`; `keep`: return the sum
    too (the residual stream goes on), else only the normed output (the final norm)."""

    @staticmethod
    def forward(ctx, res, delta, weight, eps: float, out_dtype: torch.dtype, keep: bool):
        total, h = _forward(res, delta, weight, eps, out_dtype, store_res=True)
        ctx.save_for_backward(total, weight)
        ctx.eps, ctx.delta_dtype, ctx.keep = eps, delta.dtype, keep
        return (total, h) if keep else h

    @staticmethod
    def backward(ctx, *grads):
        total, weight = ctx.saved_tensors
        dres, dh = grads if ctx.keep else (None, grads[0])
        dx, ddelta, dw = _backward(total, weight, dh, dres, ctx.eps, total.dtype, ctx.delta_dtype)
        return dx, ddelta, dw, None, None, None


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    if weight.shape != x.shape[-1:]:
        raise ValueError(
            f"rms norm: weight {tuple(weight.shape)} does not match the last dimension of {tuple(x.shape)}"
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    """`F.rms_norm(x, weight, eps)` over the last dimension, computed in FP32, in `out_dtype`."""
    _check(x, weight)
    return _Norm.apply(x, weight.contiguous(), eps, out_dtype)


def add_rms_norm(
    res: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype, keep: bool = True
):
    """(res + delta, rms_norm(res + delta) * weight in `out_dtype`), or only the latter where
    `keep` is False; the sum keeps `res`'s dtype (the FP32 residual stream)."""
    _check(res, weight)
    if delta.shape != res.shape:
        raise ValueError(f"add_rms_norm: residual {tuple(res.shape)} and delta {tuple(delta.shape)} differ")
    return _AddNorm.apply(res, delta, weight.contiguous(), eps, out_dtype, keep)
