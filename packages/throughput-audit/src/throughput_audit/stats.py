"""The arithmetic of the measurement protocol, written out again from the guide (docs/guide.md).

Nothing here is imported from the worker or the controller: the audit's value is
that it reaches the same figures by its own route.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def median(values: Sequence[float]) -> float:
    """The middle value, or the mean of the two middle values for an even count."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def sample_cv(values: Sequence[float]) -> float:
    """Sample coefficient of variation: standard deviation with n-1, over the mean."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = math.fsum(values) / n
    if mean == 0:
        return math.inf
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(var) / abs(mean)


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """sum(value * weight) / sum(weight)."""
    total = math.fsum(weights)
    if total <= 0:
        raise ValueError("weights sum to zero")
    return math.fsum(v * w for v, w in zip(values, weights, strict=True)) / total


def close(a: float | None, b: float | None, *, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def first_difference(a: Sequence[float], b: Sequence[float], *, rel: float = 1e-9, abs_: float = 1e-12) -> int | None:
    """The first index at which two series of figures differ (one ending first counts), None if they agree."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or not close(a[i], b[i], rel=rel, abs_=abs_):
            return i
    return None


def agree(a: Any, b: Any, *, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    """Flags exactly, series element by element and in length, other figures within the tolerances."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return first_difference(a, b, rel=rel, abs_=abs_) is None
    return close(a, b, rel=rel, abs_=abs_)


def parameters(*, vocab_size: int, d_model: int, n_layers: int, n_heads: int, head_dim: int, ffn_dim: int) -> int:
    """Trainable parameters of the guide's (docs/guide.md) Llama-style decoder.

    Tied embedding (vocab x width); per layer: q, k, v, o projections (width x heads*head_dim
    each), SwiGLU gate, up and down (width x ffn each), two RMSNorm weights; a final RMSNorm.
    No biases.
    """
    attention = 4 * d_model * (n_heads * head_dim)
    mlp = 3 * d_model * ffn_dim
    norms = 2 * d_model
    return vocab_size * d_model + n_layers * (attention + mlp + norms) + d_model


def flops_per_token(*, parameters: int, n_layers: int, d_model: int, context: int) -> int:
    """Training FLOPs per token: 6P + 12 x layers x width x context (PaLM, appendix B)."""
    return 6 * parameters + 12 * n_layers * d_model * context


# Parameter counts the guide (docs/guide.md) prints for its larger presets: a second, external anchor.
GUIDE_PARAMETERS = {"250m": 251_943_360, "500m": 516_814_080}
