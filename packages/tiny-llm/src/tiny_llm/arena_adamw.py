"""ArenaAdamW: AdamW with global-norm clipping over flat FP32 arenas, graph-safe.

Layout. Parameters, gradients and both moments live in four flat tensors (the
"arenas") of identical layout. Every parameter's `.data` and `.grad` are views
into the parameter and gradient arenas, so backward accumulates straight into the
gradient arena: "gathering" the gradients costs nothing, and the whole optimizer
works on four big tensors instead of hundreds of small ones. Each parameter's slice
starts on a 64-element (256-byte) boundary, because inductor copies misaligned
inputs and vectorised kernels want aligned loads; the padding stays zero forever
(zero gradient, zero moments, and weight decay keeps zero at zero).

Weight decay (decoupled, AdamW) applies to every matrix: attention, MLP and the tied
embedding / LM-head matrix (it is an ordinary projection for the output, and
nanoGPT and Llama-recipes decay it too). It does not apply to the RMSNorm gains
(1-D): decaying a gain towards 0 would shrink a layer's output scale rather than
regularise its weights. Decayed parameters come first in the arena, then the
undecayed ones, so each group is one contiguous slice.

One `step()`, with no host synchronisation anywhere (so it can be captured in a
CUDA graph):
1. global gradient norm over the gradient arena (one reduction);
2. finite check on that norm (a NaN/Inf in any gradient makes it non-finite);
3. clipping coefficient min(1, max_norm / (norm + 1e-6)), as `clip_grad_norm_`;
4. the AdamW update of moments and weights, skipped entirely when not finite,
   with bias corrections from a device-side step counter;
5. commit: the norm, the finite flag, a sticky non-finite count, the counter of
   attempted updates (`updates`, for the protocol's exact count check) and the
   AdamW step (`step`, advanced only by applied updates).

On CUDA (FP32 arenas) step 4 is `torch._fused_adamw_` over each group's single flat
slice: the clip enters as its `grad_scale` (grads are divided by it) and the finite
check as its `found_inf` (the kernel returns early when set). That kernel does not
advance the step tensor, so we advance it first (inside the graph). Elsewhere (CPU,
or FP64 arenas in tests) a pure-tensor path does the same arithmetic with
`torch.where` selecting the old values when the update is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

ALIGN = 64  # elements; 256 bytes in FP32


def decays(name: str, p: torch.Tensor) -> bool:
    """Matrices decay; vectors (RMSNorm gains) do not. See the module docstring."""
    return p.ndim >= 2


@dataclass(frozen=True)
class Slot:
    name: str
    offset: int
    numel: int
    shape: tuple[int, ...]


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class ArenaAdamW:
    def __init__(
        self,
        model: nn.Module,
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.1,
        max_norm: float | None = 1.0,
        dtype: torch.dtype = torch.float32,
        fused: bool | None = None,
    ) -> None:
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.weight_decay, self.max_norm = weight_decay, max_norm

        named = list(dict(model.named_parameters()).items())  # tied weights appear once
        ordered = [item for item in named if decays(*item)] + [item for item in named if not decays(*item)]
        device = named[0][1].device
        slots, offset, decay_end = [], 0, 0
        for name, p in ordered:
            slots.append(Slot(name, offset, p.numel(), tuple(p.shape)))
            offset = _align(offset + p.numel())
            if decays(name, p):
                decay_end = offset
        self.slots, self.numel, self.decay_end = slots, offset, decay_end
        self.parameters = [p for _, p in ordered]

        # Four arenas; parameters and gradients become views into the first two.
        zeros = lambda: torch.zeros(offset, device=device, dtype=dtype)  # noqa: E731
        self.params, self.grads, self.exp_avg, self.exp_avg_sq = zeros(), zeros(), zeros(), zeros()
        with torch.no_grad():
            for slot, p in zip(slots, self.parameters):
                view = self.params[slot.offset : slot.offset + slot.numel].view(slot.shape)
                view.copy_(p.detach())
                p.data = view
                p.grad = self.grads[slot.offset : slot.offset + slot.numel].view(slot.shape)

        # Device-side state; all updated in place so a captured graph sees fixed addresses.
        f32 = dict(device=device, dtype=torch.float32)
        self.step_t = torch.zeros((), **f32)  # applied AdamW steps (bias corrections)
        self.updates = torch.zeros((), device=device, dtype=torch.int64)  # attempted updates
        self.nonfinite = torch.zeros((), device=device, dtype=torch.int64)  # sticky count
        self.grad_norm = torch.zeros((), device=device, dtype=dtype)
        self.finite = torch.ones((), device=device, dtype=torch.bool)
        self._grad_scale = torch.ones((), **f32)
        self._found_inf = torch.zeros((), **f32)
        if fused is None:
            fused = device.type == "cuda" and dtype == torch.float32
        self.fused = fused
        groups = [(0, decay_end, weight_decay), (decay_end, offset, 0.0)]
        self.groups = [(lo, hi, wd) for lo, hi, wd in groups if hi > lo]

    # ------------------------------------------------------------------ API

    @torch.no_grad()
    def zero_grad(self) -> None:
        """One memset over the gradient arena; `.grad` views stay valid."""
        self.grads.zero_()

    @torch.no_grad()
    def step(self) -> None:
        norm = torch.linalg.vector_norm(self.grads)
        finite = torch.isfinite(norm)
        if self.max_norm is not None:
            # grad / scale == grad · min(1, max_norm / (norm + 1e-6)), clip_grad_norm_'s coefficient.
            scale = torch.clamp((norm + 1e-6) / self.max_norm, min=1.0)
        else:
            scale = torch.ones_like(norm)
        self.grad_norm.copy_(norm)
        self.finite.copy_(finite)
        self.nonfinite.add_((~finite).to(torch.int64))
        self.updates.add_(1)
        self.step_t.add_(finite.to(torch.float32))
        if self.fused:
            self._fused_update(scale, finite)
        else:
            self._tensor_update(scale.to(self.params.dtype), finite)

    def check_views(self) -> None:
        """Raise if autograd replaced a `.grad` (or something replaced `.data`) instead of
        writing into the arena: the optimizer would then silently update stale values."""
        base_p, base_g = self.params.data_ptr(), self.grads.data_ptr()
        size = self.params.element_size()
        for slot, p in zip(self.slots, self.parameters):
            if p.data_ptr() != base_p + slot.offset * size:
                raise RuntimeError(f"parameter {slot.name} is no longer a view into the arena")
            if p.grad is None or p.grad.data_ptr() != base_g + slot.offset * size:
                raise RuntimeError(f"gradient of {slot.name} is no longer a view into the arena")

    def state_is_finite(self) -> torch.Tensor:
        """A device bool: no skipped non-finite update so far and all weights finite."""
        return (self.nonfinite == 0) & torch.isfinite(self.params).all()

    def metrics(self) -> dict[str, float]:
        """Reads device state (synchronises): for checks between windows and tests."""
        return {
            "updates": int(self.updates.item()),
            "step": float(self.step_t.item()),
            "grad_norm": float(self.grad_norm.item()),
            "finite": bool(self.finite.item()),
            "nonfinite": int(self.nonfinite.item()),
        }

    # ------------------------------------------------------------ internals

    def _fused_update(self, scale: torch.Tensor, finite: torch.Tensor) -> None:
        self._grad_scale.copy_(scale)  # FP32 arenas only, so no dtype change
        self._found_inf.copy_((~finite).to(torch.float32))
        for lo, hi, wd in self.groups:
            torch._fused_adamw_(
                [self.params[lo:hi]],
                [self.grads[lo:hi]],
                [self.exp_avg[lo:hi]],
                [self.exp_avg_sq[lo:hi]],
                [],
                [self.step_t],
                lr=self.lr,
                beta1=self.beta1,
                beta2=self.beta2,
                weight_decay=wd,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
                grad_scale=self._grad_scale,
                found_inf=self._found_inf,
            )

    def _tensor_update(self, scale: torch.Tensor, finite: torch.Tensor) -> None:
        # The same arithmetic as torch.optim.AdamW (decoupled decay, then the Adam step),
        # written over whole slices; `where` keeps the old state when the update is skipped.
        step = self.step_t.to(self.params.dtype)
        bc1 = 1 - self.beta1**step
        bc2_sqrt = torch.sqrt(1 - self.beta2**step)
        for lo, hi, wd in self.groups:
            p, g = self.params[lo:hi], self.grads[lo:hi]
            m, v = self.exp_avg[lo:hi], self.exp_avg_sq[lo:hi]
            g_clipped = g / scale
            m_new = m * self.beta1 + g_clipped * (1 - self.beta1)
            v_new = v * self.beta2 + g_clipped * g_clipped * (1 - self.beta2)
            p_new = p * (1 - self.lr * wd)
            denom = v_new.sqrt() / bc2_sqrt + self.eps
            p_new = p_new - (self.lr / bc1) * m_new / denom
            g.copy_(torch.where(finite, g_clipped, g))
            m.copy_(torch.where(finite, m_new, m))
            v.copy_(torch.where(finite, v_new, v))
            p.copy_(torch.where(finite, p_new, p))
