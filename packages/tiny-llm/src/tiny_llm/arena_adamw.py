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

Four kernels do steps 1-5 (`kernel=`), with the same arithmetic; `kernel=None` ("auto")
picks "triton" on CUDA with FP32 arenas, "fused" there when triton does not import, and
"tensor" otherwise:
- "tensor": plain tensor operations over each group's slice, `torch.where` selecting the
  old values when the update is skipped. The default off CUDA (CPU, FP64 arenas in tests).
- "fused" (the default on CUDA with FP32 arenas when triton does not import):
  `torch._fused_adamw_` over each group's
  single flat slice; the clip enters as its `grad_scale` (grads are divided by it) and
  the finite check as its `found_inf` (the kernel returns early when set). It does not
  advance the step tensor, so we advance it first (inside the graph).
- "compiled": the "tensor" step under `torch.compile`: inductor emits the norm as a
  reduction and each group's update as a pointwise kernel reading p, g, m, v and writing
  p, m, v, the 32 bytes per parameter the step cannot avoid. Opt-in: it is slower than
  "fused" (docs/performance.md).
- "triton": `tiny_llm.triton_adamw`, two Triton passes (a deterministic multi-block norm
  whose last program also does the finite check, clip divisor and counters; then one
  update reading p, g, m, v and writing p, m, v). FP32 arenas on CUDA, or CPU tensors
  under `TRITON_INTERPRET=1` (tests). The default on CUDA with FP32 arenas: it runs near its
  floor, faster than "fused" at every preset measured (docs/performance.md).
"tensor" writes the clipped gradient back into the gradient arena, as `clip_grad_norm_`
would; "fused" does too (`torch._fused_adamw_` stores `grad / grad_scale` whenever it is
given a `grad_scale`: 4 bytes per parameter beyond the floor); "compiled" and "triton"
leave the arena as backward wrote it (the next update zeroes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

ALIGN = 64  # elements; 256 bytes in FP32
KERNELS = ("tensor", "fused", "compiled", "triton")


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
        model: nn.Module | list[tuple[str, nn.Parameter]],
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.1,
        max_norm: float | None = 1.0,
        dtype: torch.dtype = torch.float32,
        kernel: str | None = None,
        other_grads: torch.Tensor | None = None,
    ) -> None:
        """`model`, or the named parameters this AdamW owns (ArenaMuon gives it the ones Muon
        does not); `other_grads`, a gradient arena of parameters it does not own whose norm
        joins the global norm (Muon's), so that clipping sees every gradient."""
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.weight_decay, self.max_norm = weight_decay, max_norm

        # tied weights appear once
        named = list(dict(model if isinstance(model, list) else model.named_parameters()).items())
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
        bind_views(slots, self.parameters, self.params, self.grads)

        # Device-side state; all updated in place so a captured graph sees fixed addresses.
        self.step_t = torch.zeros((), device=device, dtype=torch.float32)  # applied AdamW steps (bias corrections)
        self.updates = torch.zeros((), device=device, dtype=torch.int64)  # attempted updates
        self.nonfinite = torch.zeros((), device=device, dtype=torch.int64)  # sticky count
        self.grad_norm = torch.zeros((), device=device, dtype=dtype)
        self.finite = torch.ones((), device=device, dtype=torch.bool)
        self._grad_scale = torch.ones((), device=device, dtype=torch.float32)
        self._found_inf = torch.zeros((), device=device, dtype=torch.float32)
        if kernel is None:
            kernel = default_kernel(device, dtype)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if kernel in ("fused", "triton") and dtype != torch.float32:
            raise ValueError(f"the {kernel} kernel needs FP32 arenas")
        if kernel == "triton" and other_grads is not None:
            raise ValueError("the triton kernel's norm covers its own arena only; use fused beside Muon")
        self.other_grads = other_grads
        self.kernel = kernel
        groups = [(0, decay_end, weight_decay), (decay_end, offset, 0.0)]
        self.groups = tuple((lo, hi, wd) for lo, hi, wd in groups if hi > lo)  # hashable: a compile-time constant
        self._triton = _triton_step(self, device) if kernel == "triton" else None

    # ------------------------------------------------------------------ API

    @torch.no_grad()
    def zero_grad(self) -> None:
        """One memset over the gradient arena; `.grad` views stay valid."""
        self.grads.zero_()

    @torch.no_grad()
    def step(self) -> None:
        if self.kernel == "fused":
            self._step_fused()
        elif self.kernel == "triton":
            assert self._triton is not None, "made in __init__ for the triton kernel"
            self._triton()
        else:
            step_fn = _compiled_tensor_step() if self.kernel == "compiled" else tensor_step
            step_fn(
                self._state(),
                self.groups,
                self.lr,
                self.beta1,
                self.beta2,
                self.eps,
                self.max_norm,
                write_grads=self.kernel == "tensor",
                other_grads=self.other_grads,
            )

    def check_views(self) -> None:
        check_views(self.slots, self.parameters, self.params, self.grads)

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

    def _state(self) -> tuple[torch.Tensor, ...]:
        return (
            self.params,
            self.grads,
            self.exp_avg,
            self.exp_avg_sq,
            self.step_t,
            self.updates,
            self.nonfinite,
            self.grad_norm,
            self.finite,
        )

    def _step_fused(self) -> None:
        scale, finite = clip_and_count(self._state(), self.max_norm, self.other_grads)
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


@torch.no_grad()
def bind_views(slots: list[Slot], parameters: list[nn.Parameter], params: torch.Tensor, grads: torch.Tensor) -> None:
    """Copy each parameter into its slot of `params` and make its `.data` and `.grad` views
    into `params` and `grads`."""
    for slot, p in zip(slots, parameters):
        view = params[slot.offset : slot.offset + slot.numel].view(slot.shape)
        view.copy_(p.detach())
        p.data = view
        p.grad = grads[slot.offset : slot.offset + slot.numel].view(slot.shape)


def check_views(slots: list[Slot], parameters: list[nn.Parameter], params: torch.Tensor, grads: torch.Tensor) -> None:
    """Raise if autograd replaced a `.grad` (or something replaced `.data`) instead of
    writing into the arena: the optimizer would then silently update stale values."""
    base_p, base_g, size = params.data_ptr(), grads.data_ptr(), params.element_size()
    for slot, p in zip(slots, parameters):
        if p.data_ptr() != base_p + slot.offset * size:
            raise RuntimeError(f"parameter {slot.name} is no longer a view into the arena")
        if p.grad is None or p.grad.data_ptr() != base_g + slot.offset * size:
            raise RuntimeError(f"gradient of {slot.name} is no longer a view into the arena")


def default_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """The kernel `kernel=None` ("auto") picks: "triton" on CUDA with FP32 arenas where triton
    imports, else "fused" there; "tensor" otherwise (CPU, FP64 arenas)."""
    if device.type != "cuda" or dtype != torch.float32:
        return "tensor"
    from tiny_llm import triton_adamw

    return "triton" if triton_adamw.available() else "fused"


def _triton_step(opt: ArenaAdamW, device: torch.device):
    from tiny_llm import triton_adamw

    if not triton_adamw.available():
        raise ValueError("the triton kernel needs the triton package")
    if device.type != "cuda" and not triton_adamw.interpreted():
        raise ValueError("the triton kernel needs CUDA (or TRITON_INTERPRET=1 for CPU tensors)")
    return triton_adamw.TritonStep(opt)


# Module-level functions over the arenas' tensors (not methods), so that the compiled
# step's cache is keyed on shapes and hyperparameters, not on an optimizer instance.


def clip_and_count(
    state: tuple[torch.Tensor, ...], max_norm: float | None, other_grads: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-3 and 5: the norm (with `other_grads`' where given), finite flag and clip divisor;
    commits the counters."""
    _, grads, _, _, step_t, updates, nonfinite, grad_norm, finite_flag = state
    norm = torch.linalg.vector_norm(grads)
    if other_grads is not None:
        norm = torch.linalg.vector_norm(torch.stack([norm, torch.linalg.vector_norm(other_grads).to(norm.dtype)]))
    finite = torch.isfinite(norm)
    if max_norm is not None:
        # grad / scale == grad · min(1, max_norm / (norm + 1e-6)), clip_grad_norm_'s coefficient.
        scale = torch.clamp((norm + 1e-6) / max_norm, min=1.0)
    else:
        scale = torch.ones_like(norm)
    grad_norm.copy_(norm)
    finite_flag.copy_(finite)
    nonfinite.add_((~finite).to(torch.int64))
    updates.add_(1)
    step_t.add_(finite.to(torch.float32))
    return scale, finite


def tensor_step(state, groups, lr, beta1, beta2, eps, max_norm, *, write_grads: bool, other_grads=None) -> None:
    """The whole step in tensor operations: the "tensor" kernel, and under torch.compile the "compiled" one.

    The same arithmetic as torch.optim.AdamW (decoupled decay, then the Adam step),
    written over whole slices; `where` keeps the old state when the update is skipped.
    """
    params, grads, exp_avg, exp_avg_sq, step_t = state[:5]
    scale, finite = clip_and_count(state, max_norm, other_grads)
    scale = scale.to(params.dtype)
    step = step_t.to(params.dtype)
    bc1 = 1 - beta1**step
    bc2_sqrt = torch.sqrt(1 - beta2**step)
    for lo, hi, wd in groups:
        p, g = params[lo:hi], grads[lo:hi]
        m, v = exp_avg[lo:hi], exp_avg_sq[lo:hi]
        g_clipped = g / scale
        m_new = m * beta1 + g_clipped * (1 - beta1)
        v_new = v * beta2 + g_clipped * g_clipped * (1 - beta2)
        p_new = p * (1 - lr * wd)
        denom = v_new.sqrt() / bc2_sqrt + eps
        p_new = p_new - (lr / bc1) * m_new / denom
        if write_grads:
            g.copy_(torch.where(finite, g_clipped, g))
        m.copy_(torch.where(finite, m_new, m))
        v.copy_(torch.where(finite, v_new, v))
        p.copy_(torch.where(finite, p_new, p))


_COMPILED = None


def _compiled_tensor_step():
    """`tensor_step` under torch.compile, made once per process.

    fullgraph: a graph break would put a host round trip inside a captured update.
    """
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(tensor_step, fullgraph=True, dynamic=False)
    return _COMPILED
