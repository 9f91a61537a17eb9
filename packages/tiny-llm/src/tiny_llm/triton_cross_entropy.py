"""The "triton" cross-entropy (`Kernels.cross_entropy`): the LM head's loss and gradient in one pass.

The default path (`F.cross_entropy(logits.float())`, compiled) reads the BF16 logits twice:
inductor's log-softmax forward computes the log-sum-exp, its backward reads them again and
writes their gradient, both below copy speed (docs/performance.md). Here one Triton program
per token reads its row of logits, computes the log-sum-exp
online, the row's loss, and writes (softmax - one-hot) / N as the logits' gradient, which
the same row's second read finds in L2: about one read and one write of the logits, and no
FP32 copy of them. The LM head's two gradient matrix products run right after, in the
forward (on cuBLAS, as `tiny_llm.cross_entropy`'s chunked variant does), so the logits and
their gradient are dead before the forward returns; backward only scales the two small
gradients by the incoming one (1 in the update), never the (N, vocab) one.

Graph-safe: no value is read back to the host (no `.item()`, no `nonzero()`), every shape is
static, and the mean is a device reduction of the per-token losses (no float atomics, so
the loss is bitwise reproducible). The arithmetic is the default's: logits from the matmul
in the autocast dtype, log-sum-exp and softmax in FP32, the gradient rounded once to the
logits' dtype before the BF16 products. Every target must be a valid class (no
`ignore_index`: the update's targets are tokens).

Importing this module needs triton; the model imports it only for
`Kernels(cross_entropy="triton")` (`tiny_llm.kernel_registry.load_triton`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# Columns per iteration: 32000 / 4096 is 8 iterations per row, 16 elements per thread at 8 warps.
BLOCK = 4096
NUM_WARPS = 8


@triton.jit
def _cross_entropy_forward(logits, targets, grad, losses, n_cols, inv_n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits + row * n_cols
    out = grad + row * n_cols
    cols = tl.arange(0, BLOCK)
    # Pass 1: running max and sum of exp, one block of the row at a time.
    m = tl.full((), -float("inf"), tl.float32)
    s = tl.full((), 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        z = tl.load(base + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(z, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
        m = m_new
    # log-softmax as inductor decomposes it, (z - max) - log(sum), so that the gradient rounds
    # as the default path's does.
    log_s = tl.log(s)
    target = tl.load(targets + row).to(tl.int64)
    z_t = tl.load(base + target).to(tl.float32)
    tl.store(losses + row, -((z_t - m) - log_s))
    # Pass 2: the gradient (softmax - one-hot) / N, rounded once to the logits' dtype.
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        z = tl.load(base + start + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.exp((z - m) - log_s) - tl.where(start + cols == target, 1.0, 0.0)
        tl.store(out + start + cols, (g * inv_n).to(grad.dtype.element_ty), mask=mask)


def loss_and_logit_grad(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of `logits` (N, V) against `targets` (N,), and its gradient
    d(mean)/d(logits) in the logits' dtype (no autograd)."""
    logits = logits.contiguous()
    n_rows, n_cols = logits.shape
    grad = torch.empty_like(logits)
    losses = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    _cross_entropy_forward[(n_rows,)](
        logits, targets.contiguous(), grad, losses, n_cols, 1.0 / n_rows, BLOCK=BLOCK, num_warps=NUM_WARPS
    )
    return losses.sum() / n_rows, grad


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = F.linear(x, weight)  # BF16 under autocast, as the LM head's output
        loss, g = loss_and_logit_grad(logits, targets)
        # The two products of the LM head's backward (autocast casts as it does for the head).
        grad_x = (g @ weight).to(x.dtype)
        grad_w = (g.t() @ x).to(torch.promote_types(weight.dtype, torch.float32))
        ctx.save_for_backward(grad_x, grad_w)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss.to(grad_x.dtype), (grad_w * grad_loss).to(ctx.weight_dtype), None


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the LM head `x @ weight.T` (x: (N, d), weight: (V, d), targets: (N,))."""
    if x.ndim != 2 or weight.ndim != 2 or targets.shape != x.shape[:1]:
        raise ValueError(
            f"linear_cross_entropy: x (N, d), weight (V, d), targets (N,); got "
            f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    return _LinearCrossEntropy.apply(x, weight, targets)
