"""ArenaMuon's element-wise work as two Triton passes over each shape group's runs.

1. momentum: reads the gradient (through the run's strided view of the arena) and the
   momentum, writes the momentum and the Newton-Schulz input (BF16 on CUDA): 14 bytes per
   element, where the tensor operations (clip, zeroing, two lerps) move 38;
2. update: reads the orthogonalised matrix and the weight, writes the weight: 10 bytes, where
   `mul_` and `addcmul_` move 18.
Each pass derives the clip divisor and the finite flag from ArenaAdamW's norm and flag on the
device, so the step adds no small kernels either. The arithmetic is the tensor path's
(`ArenaMuon` in tiny_llm.arena_muon): ATen's lerp formula (from the start for a weight below
0.5, from the end otherwise), the clip as a division, decay then update; it equals that path
within FP32 rounding (the compiler may contract into FMAs). Triton's CPU interpreter rounds
BF16 stores towards zero where CUDA rounds to nearest, so interpreted runs differ from the
tensor path by up to one BF16 step in the Newton-Schulz input.
"""

from __future__ import annotations

import math

import torch

# triton_adamw is the one home of whether triton imports and whether it is interpreted.
from tiny_llm.triton_adamw import BLOCK, available, interpreted, triton

__all__ = ["BLOCK", "TritonMuon", "available", "interpreted"]

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _lerp(start, end, weight):
        return tl.where(tl.abs(weight) < 0.5, start + weight * (end - start), end - (end - start) * (1.0 - weight))

    @triton.jit
    def _finite_and_scale(norm_ptr, finite_ptr, max_norm):
        finite = tl.load(finite_ptr) != 0
        # clip_grad_norm_'s divisor; 1 when not finite, where the gradient is zeroed anyway
        scale = tl.maximum(tl.div_rn(tl.load(norm_ptr) + 1e-6, max_norm), 1.0)
        return finite, tl.where(finite, scale, 1.0)

    @triton.jit
    def _momentum(
        g_ptr, m_ptr, x_ptr, norm_ptr, finite_ptr, numel, stride, max_norm, lerp_weight, momentum,
        NESTEROV: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # A 2-D grid (block of a matrix, matrix): no program straddles two matrices, so the
        # strided address needs no per-element division.
        within = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        matrix = tl.program_id(1).to(tl.int64)
        mask = within < numel
        offs = matrix * numel + within
        g = tl.load(g_ptr + matrix * stride + within, mask=mask, other=0.0)
        m = tl.load(m_ptr + offs, mask=mask, other=0.0)
        finite, scale = _finite_and_scale(norm_ptr, finite_ptr, max_norm)
        # A non-finite step: a zero gradient and a zero lerp weight leave the momentum as it was.
        g = tl.where(finite, tl.div_rn(g, scale), 0.0)
        m = _lerp(m, g, tl.where(finite, lerp_weight, 0.0))
        tl.store(m_ptr + offs, m, mask=mask)
        x = _lerp(g, m, momentum) if NESTEROV else m
        tl.store(x_ptr + offs, x.to(x_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _update(p_ptr, o_ptr, finite_ptr, numel, stride, decay, neg_lr, BLOCK: tl.constexpr):
        within = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        matrix = tl.program_id(1).to(tl.int64)
        mask = within < numel
        offs = matrix * numel + within
        p_offs = matrix * stride + within
        p = tl.load(p_ptr + p_offs, mask=mask)
        o = tl.load(o_ptr + offs, mask=mask).to(tl.float32)
        finite = tl.load(finite_ptr) != 0
        p = p * tl.where(finite, decay, 1.0)
        p = p + o * tl.where(finite, neg_lr, 0.0)
        tl.store(p_ptr + p_offs, p, mask=mask)


class TritonMuon:
    """The two passes for one ArenaMuon (FP32 arenas): `momentum(group)` returns the stack
    Newton-Schulz runs on, `update(group, ortho)` writes the weights."""

    def __init__(self, opt, *, block: int = BLOCK) -> None:
        if triton is None:
            raise ValueError("the triton element-wise passes need the triton package")
        if opt.params.dtype != torch.float32:
            raise ValueError("the triton element-wise passes need FP32 arenas")
        if opt.params.device.type != "cuda" and not interpreted():
            raise ValueError("the triton element-wise passes need CUDA (or TRITON_INTERPRET=1 for CPU tensors)")
        self.opt, self.block = opt, block
        a = opt.adamw
        self.norm, self.finite = a.grad_norm, a.finite.view(torch.uint8)  # triton reads bytes
        self.max_norm = math.inf if opt.max_norm is None else opt.max_norm
        c = opt.config
        self.decay = 1 - c.lr * c.weight_decay

    def momentum(self, group) -> torch.Tensor:
        c = self.opt.config
        x = torch.empty(group.momentum.shape, device=group.momentum.device, dtype=self.opt.ns_dtype)
        start = 0
        for grads in group.grads:
            stop = start + grads.shape[0]
            numel = grads[0].numel()
            _momentum[(triton.cdiv(numel, self.block), grads.shape[0])](
                grads, group.momentum[start:stop], x[start:stop], self.norm, self.finite, numel,
                grads.stride(0), self.max_norm, 1 - c.muon_momentum, c.muon_momentum, NESTEROV=c.muon_nesterov, BLOCK=self.block,
            )  # fmt: skip
            start = stop
        return x

    def update(self, group, ortho: torch.Tensor) -> None:
        start = 0
        for params in group.params:
            stop = start + params.shape[0]
            numel = params[0].numel()
            _update[(triton.cdiv(numel, self.block), params.shape[0])](
                params, ortho[start:stop], self.finite, numel, params.stride(0), self.decay, -group.lr,
                BLOCK=self.block,
            )  # fmt: skip
            start = stop
