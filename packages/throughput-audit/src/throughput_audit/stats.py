"""The arithmetic of the measurement protocol, written out again from the guide (docs/guide.md).

Nothing here is imported from the worker or the controller: the audit's value is
that it reaches the same figures by its own route.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


def parameters(
    *,
    vocab_size: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    kv_heads: int,
    head_dim: int,
    ffn_dim: int,
    knobs: Mapping[str, Any],
) -> int:
    """Trainable parameters of the guide's (docs/guide.md) Llama-style decoder, `knobs` its
    knob values by name (`throughput_schema.knobs.knob_values`; what each does is written
    out here again, not read from the schema's table).

    The input embedding (vocab x width), and an LM head of the same size unless the two are
    tied; per layer: a q projection (width x heads*head_dim), k and v projections (width x
    kv_heads*head_dim each), an output projection (heads*head_dim x width), biases on q, k
    and v only where asked, a head_dim RMSNorm weight on q and one on k where asked (or, normed
    whole, one as wide as all q heads and one as wide as all k heads), SwiGLU
    gate, up and down (width x ffn each), two RMSNorm weights (four where each sublayer's
    output is normed too, `sandwich_norm`); a final RMSNorm.
    """
    q_width, kv_width = n_heads * head_dim, kv_heads * head_dim
    attention = d_model * q_width + 2 * d_model * kv_width + q_width * d_model
    biases = q_width + 2 * kv_width if knobs["qkv_bias"] else 0
    head_norms = 2 * head_dim if knobs["qk_norm"] else 0
    head_norms += q_width + kv_width if knobs["qk_norm_whole"] else 0
    mlp = 3 * d_model * ffn_dim
    norms = (4 if knobs["sandwich_norm"] else 2) * d_model
    embeddings = vocab_size * d_model * (1 if knobs["tie_embeddings"] else 2)
    return embeddings + n_layers * (attention + biases + head_norms + mlp + norms) + d_model


def lookup_parameters(*, vocab_size: int, d_model: int, knobs: Mapping[str, Any]) -> int:
    """The parameters only looked up per token: an untied input embedding; tied, it is also
    the LM head, a matmul."""
    return 0 if knobs["tie_embeddings"] else vocab_size * d_model


def flops_per_token(
    *,
    parameters: int,
    lookup_parameters: int,
    n_layers: int,
    n_heads: int,
    head_dim: int,
    context: int,
    knobs: Mapping[str, Any],
) -> int:
    """Training FLOPs per token: 6 x (P less the parameters only looked up) + 12 x heads x
    head_dim x the keys each layer attends to, summed over the layers (PaLM, appendix B): the
    context in a global layer, the smaller of the context and the window in a windowed one
    (`sliding_layers`), never halved for causality. An untied input embedding is a lookup, not
    a matmul; tied, it is also the LM head, which is one. Attention's width is heads x
    head_dim, whatever the model's width."""
    windowed = len(knobs["sliding_layers"])
    window = context if knobs["sliding_window"] is None else min(context, knobs["sliding_window"])
    keys = (n_layers - windowed) * context + windowed * window
    return 6 * (parameters - lookup_parameters) + 12 * n_heads * head_dim * keys


# Parameter counts the guide (docs/guide.md) prints for its larger presets: a second, external anchor.
GUIDE_PARAMETERS = {"250m": 251_943_360, "500m": 516_814_080}
