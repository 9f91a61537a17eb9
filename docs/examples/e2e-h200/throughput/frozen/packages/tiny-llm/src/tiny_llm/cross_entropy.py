"""The "chunked" cross-entropy variant (`Kernels.cross_entropy`): LM head and loss over token chunks."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _ChunkedCrossEntropy(torch.autograd.Function):
    """mean cross-entropy of `x @ weight.T` against `targets`, `chunk` tokens at a time.

    The arithmetic is the default path's, chunk by chunk: the logits come out of the
    matmul in the ambient autocast dtype (BF16 in the update), are upcast to FP32 for
    the log-sum-exp, and the logits' gradient (softmax - one-hot) / N is cast back to
    the logits' dtype before the two gradient matmuls, as autograd does for
    `F.cross_entropy(logits.float())` (FP32 even for a float64 model, as there). The weight's gradient is accumulated over chunks
    in FP32. Both gradients are computed here in the forward (a chunk's logits are
    dead once its gradients exist); backward only scales them by the incoming gradient.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
        n = x.shape[0]
        grad_x = torch.empty_like(x)
        grad_w = torch.zeros_like(weight, dtype=torch.promote_types(weight.dtype, torch.float32))
        loss = torch.zeros((), device=x.device, dtype=torch.float32)
        for start in range(0, n, chunk):
            xc, tc = x[start : start + chunk], targets[start : start + chunk]
            logits = F.linear(xc, weight)  # BF16 under autocast, as the LM head's output
            wide = logits.float()  # FP32 log-sum-exp, as the default path's logits.float()
            lse = torch.logsumexp(wide, dim=-1)
            loss = loss + (lse - wide.gather(1, tc[:, None]).squeeze(1)).sum()
            g = torch.exp(wide - lse[:, None])
            g = g.scatter_add(1, tc[:, None], torch.full_like(lse[:, None], -1.0))
            g = (g / n).to(logits.dtype)
            grad_x[start : start + chunk] = (g @ weight).to(x.dtype)
            grad_w += (g.t() @ xc).to(grad_w.dtype)
        ctx.save_for_backward(grad_x, grad_w)
        ctx.weight_dtype = weight.dtype
        return loss / n

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss.to(grad_x.dtype), (grad_w * grad_loss).to(ctx.weight_dtype), None, None


def chunked_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """Mean cross-entropy of the LM head `x @ weight.T` (x: (N, d), targets: (N,))."""
    return _ChunkedCrossEntropy.apply(x, weight, targets, chunk)
