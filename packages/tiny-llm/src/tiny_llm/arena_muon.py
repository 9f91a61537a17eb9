"""ArenaMuon: Muon on the hidden matrices and ArenaAdamW on the rest, graph-safe.

Which parameters Muon owns is `throughput_schema.muon`'s rule (every 2-D weight inside a
layer, the fused `qkv` and `gate_up` weights orthogonalised as q, k, v and gate, up); the
embedding, an untied head and the norms stay on an ArenaAdamW with the recipe's settings.

Layout. Muon's parameters and gradients live in two flat FP32 arenas like ArenaAdamW's (the
parameters' `.data` and `.grad` are views into them), ordered by role rather than by layer:
every layer's `qkv` weight, then every layer's `proj`, and so on, each slot aligned as
ArenaAdamW's. The matrices of one shape then sit at a constant stride, so each shape group
is a few strided views (`Run`s) of the arenas, often one: the q, k and v of every layer
with no padding between them are one (3 · layers, rows, cols) view. The step reads the
gradients and updates the parameters in place through these views, never stacking or
copying them back. The one state tensor, the momentum, is one (count, rows, cols) tensor per
shape, in the same order.

One `step()`, with no host synchronisation anywhere (so it is captured in the update graph):
1. ArenaAdamW's step: the global norm over both gradient arenas, the finite check, the
   clipping divisor and the counters, and the AdamW update of its own parameters;
2. per shape: the momentum updated as torch.optim.Muon does (`buf.lerp_(g, 1 - momentum)`
   on the clipped gradient g, Nesterov `g.lerp(buf, momentum)`) and the result written
   straight into the BF16 stack Newton-Schulz runs on; Newton-Schulz on the stack (`newton_schulz`);
   then decoupled weight decay with the recipe's lr and the update with the adjusted lr,
   in place on the parameters.
A non-finite norm skips the step without selecting old against new momentum and weights: the
clipped gradient is zeroed (so that no NaN or Inf reaches anything else), the momentum's lerp
weight and the learning rate become 0 and the decay factor 1 (chosen on the device by the
finite flag), which leaves momentum and weights bitwise as they were.
The element-wise work of step 2 (`elementwise`) is two Triton passes per shape on CUDA
(`tiny_llm.triton_muon`) and the same arithmetic in tensor operations elsewhere.
The products are BF16 (torch.optim.Muon's own cast) wherever the update runs under BF16
autocast: on CUDA, and on a CPU that multiplies BF16 natively; elsewhere FP32, as the rest of
that CPU's update (`tiny_llm.hardware.autocast_dtype`), and with FP64 arenas (CPU tests against
an exact reference) FP64.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
import torch.nn as nn

from throughput_schema import OptimizerConfig
from throughput_schema.muon import MuonMatrix, adjusted_lr, muon_matrices, owns
from tiny_llm import triton_muon
from tiny_llm.arena_adamw import ArenaAdamW, Slot, _align, bind_views, check_views
from tiny_llm.hardware import autocast_dtype
from tiny_llm.model import Transformer

NS_EPS = 1e-7  # torch.optim.Muon's: the clamp on the Frobenius norm
ELEMENTWISE = ("tensor", "triton")
LAYER = re.compile(r"^blocks\.(\d+)\.")


@dataclass(frozen=True)
class Run:
    """`count` matrices of one shape at a constant `stride` (elements) from `offset` in the arenas."""

    offset: int
    stride: int
    count: int


class ShapeGroup:
    """The matrices of one shape: their runs, the parameter and gradient views over them, and
    their momentum (the runs' matrices in order)."""

    def __init__(self, shape: tuple[int, int], runs: list[Run], params: torch.Tensor, grads: torch.Tensor, lr: float):
        self.shape, self.runs, self.lr = shape, runs, lr
        rows, cols = shape
        views = [((r.count, rows, cols), (r.stride, cols, 1), r.offset) for r in runs]
        self.params = [params.as_strided(*v) for v in views]
        self.grads = [grads.as_strided(*v) for v in views]
        count = sum(r.count for r in runs)
        self.momentum = torch.zeros((count, rows, cols), device=params.device, dtype=params.dtype)
        self.neg_lr = torch.full((), -lr, device=params.device, dtype=params.dtype)


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
        elementwise: str | None = None,
    ) -> None:
        """`model` must carry its recipe's `ModelConfig` as `cfg` (tiny_llm.model.Transformer);
        `kernel` is the AdamW part's (auto: "fused" on CUDA, whose norm covers both arenas;
        "tensor" elsewhere); `ns_dtype`, the Newton-Schulz products' (module docstring);
        `elementwise`, how the momentum and the weights are updated: "triton"
        (`tiny_llm.triton_muon`, the default on CUDA with FP32 arenas where triton imports) or
        "tensor" (tensor operations, the default elsewhere).
        Raises `NoMuonMatrix` for a model without a hidden matrix."""
        self.config = config
        matrices = muon_matrices(model.cfg)
        named = list(dict(model.named_parameters()).items())
        mine = by_role([(n, p) for n, p in named if owns(n, p.ndim)])
        device = named[0][1].device
        slots, offset = [], 0
        for name, p in mine:
            slots.append(Slot(name, offset, p.numel(), tuple(p.shape)))
            offset = _align(offset + p.numel())
        self.slots, self.parameters = slots, [p for _, p in mine]
        self.params = torch.zeros(offset, device=device, dtype=dtype)
        self.grads = torch.zeros(offset, device=device, dtype=dtype)
        bind_views(slots, self.parameters, self.params, self.grads)
        self.groups = self._groups(matrices, {s.name: s.offset for s in slots})
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
        # Device scalars the step picks between by the finite flag (no host round trip).
        scalar = lambda v: torch.full((), v, device=device, dtype=dtype)  # noqa: E731
        self._zero, self._one = scalar(0.0), scalar(1.0)
        self._lerp_weight = scalar(1 - config.muon_momentum)
        self._decay = scalar(1 - config.lr * config.weight_decay)
        if elementwise is None:
            elementwise = (
                "triton" if device.type == "cuda" and dtype == torch.float32 and triton_muon.available() else "tensor"
            )
        if elementwise not in ELEMENTWISE:
            raise ValueError(f"elementwise must be one of {', '.join(ELEMENTWISE)}, got {elementwise!r}")
        self.elementwise = elementwise
        self._triton = triton_muon.TritonMuon(self) if elementwise == "triton" else None

    def _groups(self, matrices: list[MuonMatrix], offsets: dict[str, int]) -> list[ShapeGroup]:
        found: dict[tuple[int, int], list[MuonMatrix]] = {}
        for m in matrices:
            found.setdefault(m.shape, []).append(m)
        groups = []
        for shape, group in found.items():
            runs = group_runs(group, offsets)
            groups.append(ShapeGroup(shape, runs, self.params, self.grads, adjusted_lr(self.config, shape)))
        return groups

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
        c = self.config
        if self._triton is not None:
            momentum, update = self._triton.momentum, self._triton.update
        else:
            s = self._scalars()
            momentum, update = partial(self._momentum, s=s), partial(self._update, s=s)
        for group in self.groups:
            ortho = newton_schulz(momentum(group), c.muon_ns_coefficients, c.muon_ns_steps)
            update(group, ortho)

    def check_views(self) -> None:
        self.adamw.check_views()
        check_views(self.slots, self.parameters, self.params, self.grads)

    def state_is_finite(self) -> torch.Tensor:
        return self.adamw.state_is_finite() & torch.isfinite(self.params).all()

    def metrics(self) -> dict[str, float]:
        return self.adamw.metrics()

    # ------------------------------------------------------------ internals

    def _scalars(self) -> Scalars:
        a = self.adamw
        finite = a.finite
        if self.max_norm is not None:
            # A non-finite norm's divisor would be NaN: 1 instead, its gradient is zeroed anyway.
            scale = torch.clamp((a.grad_norm + 1e-6) / self.max_norm, min=1.0).to(self.params.dtype)
            scale = torch.where(finite, scale, self._one)
        else:
            scale = self._one
        lerp_weight = torch.where(finite, self._lerp_weight, self._zero)
        return Scalars(finite, scale, lerp_weight, torch.where(finite, self._decay, self._one))

    def _momentum(self, group: ShapeGroup, s: Scalars) -> torch.Tensor:
        """The momentum updated in place; returns the stack Newton-Schulz runs on."""
        c = self.config
        x = torch.empty(group.momentum.shape, device=self.params.device, dtype=self.ns_dtype)
        start = 0
        for grads in group.grads:
            stop = start + grads.shape[0]
            buf = group.momentum[start:stop]
            g = torch.div(grads, s.scale)
            torch.where(s.finite, g, self._zero, out=g)
            buf.lerp_(g, s.lerp_weight)
            if c.muon_nesterov:
                torch.lerp(g, buf, c.muon_momentum, out=x[start:stop])
            else:
                x[start:stop].copy_(buf)
            start = stop
        return x

    def _update(self, group: ShapeGroup, ortho: torch.Tensor, s: Scalars) -> None:
        lr = torch.where(s.finite, group.neg_lr, self._zero)
        start = 0
        for params in group.params:
            stop = start + params.shape[0]
            params.mul_(s.decay)
            params.addcmul_(ortho[start:stop], lr)
            start = stop


class Scalars(NamedTuple):
    """The tensor path's device scalars for one step, each chosen by the finite flag."""

    finite: torch.Tensor
    scale: torch.Tensor  # the clip divisor; 1 when not finite
    lerp_weight: torch.Tensor  # the momentum's: 1 - momentum; 0 when not finite
    decay: torch.Tensor  # 1 - lr · weight decay; 1 when not finite


def by_role(named: list[tuple[str, nn.Parameter]]) -> list[tuple[str, nn.Parameter]]:
    """`named` with every layer's parameter of one role together (all `qkv`, then all `proj`,
    ...), roles in their first appearance's order and layers in order within a role."""
    role = lambda name: LAYER.sub("", name)  # noqa: E731
    order = list(dict.fromkeys(role(n) for n, _ in named))
    return sorted(named, key=lambda item: order.index(role(item[0])))


def group_runs(group: list[MuonMatrix], offsets: dict[str, int]) -> list[Run]:
    """The fewest runs covering one shape's matrices, trying them layer by layer within a
    parameter (q0 k0 v0 q1 ...: one run where q, k and v share the shape) and block by block
    (q0 q1 ... k0 k1 ...: one run per block where they do not)."""
    role = {r: i for i, r in enumerate(dict.fromkeys(LAYER.sub("", m.name) for m in group))}
    key = lambda m: role[LAYER.sub("", m.name)]  # noqa: E731
    orders = (
        sorted(group, key=lambda m: (key(m), layer(m), m.start)),
        sorted(group, key=lambda m: (key(m), m.start, layer(m))),
    )
    numel = group[0].shape[0] * group[0].cols
    candidates = [runs_of([offsets[m.name] + m.start * m.cols for m in order], numel) for order in orders]
    return min(candidates, key=len)


def layer(m: MuonMatrix) -> int:
    found = LAYER.match(m.name)
    return int(found.group(1)) if found else 0


def runs_of(offsets: list[int], numel: int) -> list[Run]:
    """Greedy runs over matrix offsets in the order given: a matrix extends the last run when it
    sits one stride after it (the stride set by the run's second matrix, never less than a
    matrix, so views never overlap)."""
    runs: list[Run] = []
    for o in offsets:
        if runs:
            last = runs[-1]
            if last.count == 1 and o - last.offset >= numel:
                runs[-1] = Run(last.offset, o - last.offset, 2)
                continue
            if last.count > 1 and o == last.offset + last.count * last.stride:
                runs[-1] = Run(last.offset, last.stride, last.count + 1)
                continue
        runs.append(Run(o, numel, 1))
    return runs


def newton_schulz(x: torch.Tensor, coefficients: tuple[float, float, float], steps: int) -> torch.Tensor:
    """torch.optim.Muon's `_zeropower_via_newtonschulz` on a (count, rows, cols) stack: the
    same products, each matrix Frobenius-normed and iterated on its wide orientation.

    A tall stack is never transposed in memory: with U the tall matrix and X = Uᵀ the wide one,
    X·Xᵀ is Uᵀ·U and a·X + B·X is (a·U + U·Bᵀ)ᵀ, so the iteration runs on U with the same
    products and every result keeps the parameters' layout (the update then reads it in order,
    where a transposed result would be read across its rows)."""
    a, b, c = coefficients
    tall = x.shape[-2] > x.shape[-1]
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=NS_EPS)
    for _ in range(steps):
        gram = x.mT @ x if tall else x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, x, poly.mT, beta=a) if tall else torch.baddbmm(x, poly, x, beta=a)
    return x
