"""The "triton" SwiGLU (`Kernels.swiglu`): silu(gate) * up and its backward, each one pass.

Compiled, inductor turns `gate, up = gate_up.chunk(2, dim=-1); silu(gate) * up` into a
backward kernel that writes d(gate_up) through a `cat` of the two halves, at about half the
copy speed (docs/performance.md). Here the
backward reads dh and the saved gate_up once and writes d(gate_up) in place of the cat,
recomputing silu rather than saving it.

Both kernels tile the (N, F) half-width space in 2D: a tile is BLOCK_ROWS tokens by
BLOCK_COLS features, so each of its rows is a contiguous run of BLOCK_COLS elements in
gate, up, h, dh and both halves of d(gate_up), and loads and stores are whole cache lines
without the per-element division a flat index into a [N, 2F] row would need.

Arithmetic is FP32, rounded once to the input's dtype (eager rounds silu(gate) to BF16
before the product; inductor's fusion does not), so results match eager within BF16
rounding.

Plain Triton calls inside a `torch.autograd.Function`: dynamo traces user Triton kernels
there (torch >= 2.3), so the compiled forward and backward launch them, and the
whole-update CUDA graph replays them. Importing this module needs triton; the model
imports it only where the SwiGLU resolves to "triton" (`Kernels(swiglu="triton")`, or "auto"
on CUDA: `tiny_llm.kernel_registry.resolve_swiglu` and `load_triton`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# 32 x 128 = 4096 elements per tile: 32 per thread at 4 warps, in 16-byte BF16 vectors,
# enough loads in flight per thread to cover HBM latency; 128 divides the presets' F.
BLOCK_ROWS = 32
BLOCK_COLS = 128
NUM_WARPS = 4


@triton.jit
def _tile(n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # int64 row offsets: N x 2F passes 2**31 elements at large batches.
    return rows.to(tl.int64)[:, None], cols[None, :], mask


@triton.jit
def _swiglu_forward(gate_up, h, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows, cols, mask = _tile(n_rows, n_cols, BLOCK_ROWS, BLOCK_COLS)
    gate_at = gate_up + rows * (2 * n_cols) + cols
    g = tl.load(gate_at, mask=mask).to(tl.float32)
    u = tl.load(gate_at + n_cols, mask=mask).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(h + rows * n_cols + cols, out.to(h.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_backward(dh, gate_up, d_gate_up, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows, cols, mask = _tile(n_rows, n_cols, BLOCK_ROWS, BLOCK_COLS)
    pair = rows * (2 * n_cols) + cols
    grad = tl.load(dh + rows * n_cols + cols, mask=mask).to(tl.float32)
    g = tl.load(gate_up + pair, mask=mask).to(tl.float32)
    u = tl.load(gate_up + pair + n_cols, mask=mask).to(tl.float32)
    s = tl.sigmoid(g)
    # d silu(g)/dg = s + g·s·(1 - s) = s·(1 + g·(1 - s))
    d_gate = grad * u * s * (1.0 + g * (1.0 - s))
    d_up = grad * g * s
    out_dtype = d_gate_up.dtype.element_ty
    tl.store(d_gate_up + pair, d_gate.to(out_dtype), mask=mask)
    tl.store(d_gate_up + pair + n_cols, d_up.to(out_dtype), mask=mask)


def _grid(n_rows: int, n_cols: int) -> tuple[int, int]:
    return triton.cdiv(n_rows, BLOCK_ROWS), triton.cdiv(n_cols, BLOCK_COLS)


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        gate_up = gate_up.contiguous()
        n_cols = gate_up.shape[-1] // 2
        n_rows = gate_up.numel() // (2 * n_cols)
        h = gate_up.new_empty(*gate_up.shape[:-1], n_cols)
        _swiglu_forward[_grid(n_rows, n_cols)](
            gate_up, h, n_rows, n_cols, BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS, num_warps=NUM_WARPS
        )
        ctx.save_for_backward(gate_up)
        return h

    @staticmethod
    def backward(ctx, dh: torch.Tensor) -> torch.Tensor:
        (gate_up,) = ctx.saved_tensors
        dh = dh.contiguous()
        n_cols = gate_up.shape[-1] // 2
        n_rows = gate_up.numel() // (2 * n_cols)
        d_gate_up = torch.empty_like(gate_up)
        _swiglu_backward[_grid(n_rows, n_cols)](
            dh, gate_up, d_gate_up, n_rows, n_cols, BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS, num_warps=NUM_WARPS
        )
        return d_gate_up


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for `gate, up = gate_up.chunk(2, dim=-1)` (gate_up: (..., 2F) -> (..., F))."""
    if gate_up.shape[-1] % 2:
        raise ValueError(f"swiglu: the last dimension must be even (gate and up halves), got {gate_up.shape[-1]}")
    return _SwiGLU.apply(gate_up)
