"""ArenaAdamW's "triton" kernel: the clipped AdamW step as two passes over the FP32 arenas.

1. The gradient's squared norm. Each program sums a fixed chunk of the gradient arena
   into one partial; a single program then adds the partials in index order. Fixed
   chunks and a fixed order (no float atomics) make the norm bitwise reproducible.
   That last program also does everything else that is one number: the finite check,
   the clip divisor, the counters and the bias corrections, written to a small device
   buffer. So the norm costs two launches, where `clip_and_count` costs about ten.
2. One pass reading p, g, m, v and writing p, m, v: 28 of the 32 bytes per parameter
   that the step cannot avoid (the norm's read of g is the other 4). Unlike
   `torch._fused_adamw_` with a `grad_scale`, it does not write the clipped gradient
   back (4 bytes per parameter fewer; the next update zeroes the arena anyway).

Nothing reads device values on the host, so the step is capturable in a CUDA graph.
The arithmetic is `torch._fused_adamw_`'s (decoupled decay `p -= lr·wd·p`, then Adam
with `g / scale`), so it equals the "fused" kernel within FP32 rounding.

Triton is optional: without it this module imports, `available()` is False and
ArenaAdamW refuses the kernel. With `TRITON_INTERPRET=1` (set before the first import)
the kernels run on CPU tensors in Triton's interpreter, which is how CPU tests check them.
"""

from __future__ import annotations

import math
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs; torch's CUDA wheels for Linux bring triton along
    triton = None

# Update pass: elements per program; 8 per thread (two 16-byte loads of each arena).
BLOCK = 1024
# Norm pass: each program sums NORM_TILES tiles of NORM_BLOCK elements into one partial:
# 16384 elements, so 20m still has ~1200 programs to spread over the GPU while 500m leaves
# ~32k partials, a 128 KB read, to the one final program, which reads FINAL_BLOCK at a time
# (one program cannot hide its load latency the way thousands do, so few, wide iterations).
# Untuned: peers.py --triton-blocks compares update block sizes.
NORM_BLOCK = 4096
NORM_TILES = 4
FINAL_BLOCK = 4096


def available() -> bool:
    return triton is not None


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if triton is not None:

    @triton.jit
    def _partial_sumsq(g_ptr, partials_ptr, n, NORM_BLOCK: tl.constexpr, NORM_TILES: tl.constexpr):
        start = tl.program_id(0).to(tl.int64) * (NORM_BLOCK * NORM_TILES)
        acc = tl.zeros([NORM_BLOCK], dtype=tl.float32)
        for t in range(NORM_TILES):
            offs = start + t * NORM_BLOCK + tl.arange(0, NORM_BLOCK)
            g = tl.load(g_ptr + offs, mask=offs < n, other=0.0)
            acc += g * g
        tl.store(partials_ptr + tl.program_id(0), tl.sum(acc, axis=0))

    @triton.jit
    def _finish_norm(
        partials_ptr,
        n_partials,
        norm_ptr,
        finite_ptr,
        nonfinite_ptr,
        updates_ptr,
        step_ptr,
        coef_ptr,
        max_norm,
        lr,
        log2_beta1,
        log2_beta2,
        FINAL_BLOCK: tl.constexpr,
    ):
        # Every thread reads the counters before any thread writes them (the barrier): a
        # thread reading a counter another had already advanced would advance it twice.
        step = tl.load(step_ptr)
        nonfinite = tl.load(nonfinite_ptr)
        updates = tl.load(updates_ptr)
        acc = tl.zeros([FINAL_BLOCK], dtype=tl.float32)
        for start in range(0, n_partials, FINAL_BLOCK):
            offs = start + tl.arange(0, FINAL_BLOCK)
            acc += tl.load(partials_ptr + offs, mask=offs < n_partials, other=0.0)
        norm = tl.sqrt_rn(tl.sum(acc, axis=0))
        finite = norm < float("inf")  # False for NaN too: any NaN or Inf gradient skips the update
        step += finite.to(tl.float32)
        tl.debug_barrier()
        tl.store(norm_ptr, norm)
        tl.store(finite_ptr, finite.to(tl.uint8))
        tl.store(nonfinite_ptr, nonfinite + 1 - finite.to(tl.int64))
        tl.store(updates_ptr, updates + 1)
        tl.store(step_ptr, step)
        # grad / scale == grad · min(1, max_norm / (norm + 1e-6)), clip_grad_norm_'s coefficient;
        # no clipping is max_norm = inf, where scale is exactly 1.
        tl.store(coef_ptr, tl.maximum(tl.div_rn(norm + 1e-6, max_norm), 1.0))
        tl.store(coef_ptr + 1, finite.to(tl.float32))
        tl.store(coef_ptr + 2, tl.div_rn(lr, 1.0 - tl.exp2(step * log2_beta1)))  # lr / bias correction 1
        tl.store(coef_ptr + 3, tl.sqrt_rn(1.0 - tl.exp2(step * log2_beta2)))  # sqrt(bias correction 2)

    @triton.jit
    def _adamw(
        p_ptr, g_ptr, m_ptr, v_ptr, coef_ptr, n, decay_end, lr, beta1, beta2, eps, weight_decay, BLOCK: tl.constexpr
    ):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        # The arenas' loads do not wait for the coefficients, so they are in flight at once.
        p = tl.load(p_ptr + offs, mask=mask)
        g = tl.load(g_ptr + offs, mask=mask)
        m = tl.load(m_ptr + offs, mask=mask)
        v = tl.load(v_ptr + offs, mask=mask)
        scale = tl.load(coef_ptr)
        # Not finite: no element is written (n_kept = 0), as fused's found_inf.
        n_kept = tl.where(tl.load(coef_ptr + 1) != 0.0, n, 0)
        step_size = tl.load(coef_ptr + 2)
        bc2_sqrt = tl.load(coef_ptr + 3)
        g = tl.div_rn(g, scale)
        # Decayed parameters come first in the arena: one launch covers both groups.
        wd = tl.where(offs < decay_end, weight_decay, 0.0)
        p = p - lr * wd * p
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        denom = tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps
        p = p - tl.div_rn(step_size * m, denom)
        keep = offs < n_kept
        tl.store(p_ptr + offs, p, mask=keep)
        tl.store(m_ptr + offs, m, mask=keep)
        tl.store(v_ptr + offs, v, mask=keep)


def _log2(beta: float) -> float:
    return math.log2(beta) if beta > 0 else -math.inf  # beta = 0: no bias correction (0 ** step == 0)


def _warps(block: int) -> int:
    return max(1, min(16, block // 256))


class TritonStep:
    """`ArenaAdamW.step` for kernel="triton": three launches, scratch allocated here, once.

    The block sizes are arguments so benchmarks can compare them and CPU tests can force
    several partials on a small arena; the norm (and so the update) depends on the norm's
    chunking, so one instance always uses the same.
    """

    def __init__(
        self,
        opt,
        *,
        block: int = BLOCK,
        norm_block: int = NORM_BLOCK,
        norm_tiles: int = NORM_TILES,
        final_block: int = FINAL_BLOCK,
    ) -> None:
        if triton is None:
            raise RuntimeError("the triton kernel needs the triton package")
        self.opt, self.block, self.norm_block, self.norm_tiles, self.final_block = (
            opt,
            block,
            norm_block,
            norm_tiles,
            final_block,
        )
        device = opt.params.device
        self.n_partials = triton.cdiv(opt.numel, norm_block * norm_tiles)
        self.partials = torch.empty(self.n_partials, device=device, dtype=torch.float32)
        # clip divisor, finite (1.0/0.0), lr / bias correction 1, sqrt(bias correction 2)
        self.coef = torch.empty(4, device=device, dtype=torch.float32)
        self.finite_u8 = opt.finite.view(torch.uint8)  # triton stores bytes; a bool tensor is one byte each

    def __call__(self) -> None:
        o = self.opt
        _partial_sumsq[(self.n_partials,)](
            o.grads,
            self.partials,
            o.numel,
            NORM_BLOCK=self.norm_block,
            NORM_TILES=self.norm_tiles,
            num_warps=_warps(self.norm_block),
        )
        max_norm = math.inf if o.max_norm is None else o.max_norm
        _finish_norm[(1,)](
            self.partials,
            self.n_partials,
            o.grad_norm,
            self.finite_u8,
            o.nonfinite,
            o.updates,
            o.step_t,
            self.coef,
            max_norm,
            o.lr,
            _log2(o.beta1),
            _log2(o.beta2),
            FINAL_BLOCK=self.final_block,
            num_warps=_warps(self.final_block),
        )
        _adamw[(triton.cdiv(o.numel, self.block),)](
            o.params,
            o.grads,
            o.exp_avg,
            o.exp_avg_sq,
            self.coef,
            o.numel,
            o.decay_end,
            o.lr,
            o.beta1,
            o.beta2,
            o.eps,
            o.weight_decay,
            BLOCK=self.block,
            num_warps=_warps(self.block),
        )
