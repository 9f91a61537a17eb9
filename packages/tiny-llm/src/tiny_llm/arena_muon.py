"""ArenaMuon: Muon on the hidden matrices and ArenaAdamW on the rest, graph-safe.

Which parameters Muon owns is `throughput_schema.muon`'s rule (every 2-D weight inside a
layer, the fused `qkv` and `gate_up` weights orthogonalised as q, k, v and gate, up); the
embedding, an untied head and the norms stay on an ArenaAdamW with the recipe's settings.

Layout. Muon's parameters and gradients live in two flat FP32 arenas like ArenaAdamW's (the
parameters' `.data` and `.grad` are views into them), and its one state tensor, the
momentum, is kept per shape: one (count, rows, cols) tensor for all matrices of a shape, so
that each shape's matrices are orthogonalised together as one batched product chain.

One `step()`, with no host synchronisation anywhere (so it is captured in the update graph):
1. ArenaAdamW's step: the global norm over both gradient arenas, the finite check, the
   clipping divisor and the counters, and the AdamW update of its own parameters;
2. per shape: the clipped gradients stacked, the momentum updated as torch.optim.Muon does
   (`buf.lerp_(g, 1 - momentum)`, Nesterov `g.lerp(buf, momentum)`), Newton-Schulz in BF16
   on the stack (transposed to wide, each matrix Frobenius-normed, the quintic iteration as
   `baddbmm`s), then decoupled weight decay with the recipe's lr and the update with the
   adjusted lr, written back to the parameters; all of it skipped when the norm is not finite.
The products are BF16 (torch.optim.Muon's own cast) wherever the update runs under BF16
autocast: on CUDA, and on a CPU that multiplies BF16 natively; elsewhere FP32, as the rest of
that CPU's update (`tiny_llm.hardware.autocast_dtype`), and with FP64 arenas (CPU tests against
an exact reference) FP64.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from throughput_schema import OptimizerConfig
from throughput_schema.muon import MuonMatrix, adjusted_lr, muon_matrices, owns
from tiny_llm.arena_adamw import ArenaAdamW, Slot, _align, bind_views, check_views
from tiny_llm.hardware import autocast_dtype
from tiny_llm.model import Transformer

NS_EPS = 1e-7  # torch.optim.Muon's: the clamp on the Frobenius norm


class ShapeGroup:
    """The matrices of one shape: their parameter and gradient views, and their momentum."""

    def __init__(self, shape: tuple[int, int], params: list[torch.Tensor], grads: list[torch.Tensor], lr: float):
        self.shape, self.params, self.grads, self.lr = shape, params, grads, lr
        self.momentum = torch.zeros((len(params), *shape), device=params[0].device, dtype=params[0].dtype)


class ArenaMuon:
    def __init__(
        self,
        model: Transformer,
        config: OptimizerConfig,
        *,
        max_norm: float | None = 1.0,
        dtype: torch.dtype = torch.float32,
        kernel: str | None = None,
        ns_dtype: torch.dtype | None = None,
    ) -> None:
        """`model` must carry its recipe's `ModelConfig` as `cfg` (tiny_llm.model.Transformer);
        `kernel` is the AdamW part's (auto: "fused" on CUDA, whose norm covers both arenas;
        "tensor" elsewhere); `ns_dtype`, the Newton-Schulz products' (module docstring).
        Raises `NoMuonMatrix` for a model without a hidden matrix."""
        self.config = config
        matrices = muon_matrices(model.cfg)
        named = list(dict(model.named_parameters()).items())
        mine = [(n, p) for n, p in named if owns(n, p.ndim)]
        device = named[0][1].device
        slots, offset = [], 0
        for name, p in mine:
            slots.append(Slot(name, offset, p.numel(), tuple(p.shape)))
            offset = _align(offset + p.numel())
        self.slots, self.parameters = slots, [p for _, p in mine]
        self.params = torch.zeros(offset, device=device, dtype=dtype)
        self.grads = torch.zeros(offset, device=device, dtype=dtype)
        bind_views(slots, self.parameters, self.params, self.grads)
        self.groups = self._groups(matrices, dict(mine))
        if kernel is None:
            kernel = "fused" if device.type == "cuda" and dtype == torch.float32 else "tensor"
        self.adamw = ArenaAdamW(
            [(n, p) for n, p in named if not owns(n, p.ndim)],
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            eps=config.eps,
            weight_decay=config.weight_decay,
            max_norm=max_norm,
            dtype=dtype,
            kernel=kernel,
            other_grads=self.grads,
        )
        self.kernel = self.adamw.kernel  # the recipe's optimizer.name says Muon ran beside it
        self.max_norm = max_norm
        if ns_dtype is None:
            ns_dtype = (autocast_dtype(device) or dtype) if dtype == torch.float32 else dtype
        self.ns_dtype = ns_dtype

    def _groups(self, matrices: list[MuonMatrix], by_name: dict[str, nn.Parameter]) -> list[ShapeGroup]:
        found: dict[tuple[int, int], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for m in matrices:
            p = by_name[m.name]
            assert p.grad is not None, "every Muon parameter's grad is a view into the arena"
            params, grads = found.setdefault(m.shape, ([], []))
            params.append(p.data[m.start : m.stop])  # rows of a fused weight: contiguous views
            grads.append(p.grad[m.start : m.stop])
        return [ShapeGroup(s, p, g, adjusted_lr(self.config, s)) for s, (p, g) in found.items()]

    # ------------------------------------------------------------------ API

    @property
    def updates(self) -> torch.Tensor:
        return self.adamw.updates

    @torch.no_grad()
    def zero_grad(self) -> None:
        self.adamw.zero_grad()
        self.grads.zero_()

    @torch.no_grad()
    def step(self) -> None:
        self.adamw.step()
        a = self.adamw
        if self.max_norm is not None:
            scale = torch.clamp((a.grad_norm + 1e-6) / self.max_norm, min=1.0).to(self.params.dtype)
        else:
            scale = torch.ones((), device=self.params.device, dtype=self.params.dtype)
        for group in self.groups:
            self._step_group(group, scale, a.finite)

    def check_views(self) -> None:
        self.adamw.check_views()
        check_views(self.slots, self.parameters, self.params, self.grads)

    def state_is_finite(self) -> torch.Tensor:
        return self.adamw.state_is_finite() & torch.isfinite(self.params).all()

    def metrics(self) -> dict[str, float]:
        return self.adamw.metrics()

    # ------------------------------------------------------------ internals

    def _step_group(self, group: ShapeGroup, scale: torch.Tensor, finite: torch.Tensor) -> None:
        c = self.config
        g = torch.stack(group.grads) / scale
        buf = group.momentum
        new_buf = buf.lerp(g, 1 - c.muon_momentum)
        buf.copy_(torch.where(finite, new_buf, buf))
        update = g.lerp(new_buf, c.muon_momentum) if c.muon_nesterov else new_buf
        ortho = newton_schulz(update.to(self.ns_dtype), c.muon_ns_coefficients, c.muon_ns_steps)
        p = torch.stack(group.params)
        p_new = p * (1 - c.lr * c.weight_decay) - group.lr * ortho.to(p.dtype)
        torch._foreach_copy_(group.params, list(torch.where(finite, p_new, p).unbind(0)))


def newton_schulz(x: torch.Tensor, coefficients: tuple[float, float, float], steps: int) -> torch.Tensor:
    """torch.optim.Muon's `_zeropower_via_newtonschulz` on a (count, rows, cols) stack: the
    same products in the same order, each matrix transposed to wide and Frobenius-normed."""
    a, b, c = coefficients
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=NS_EPS)
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x
