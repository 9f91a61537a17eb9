"""A curve's most energy-efficient stable batch, beside its recommended (speed) batch.

The lowest median joules per token among a curve's stable points that measured energy,
and the batches the noise cannot tell apart from it: those whose tokens per joule are
within the campaign's noise threshold T of the best, the same test (`noise.within`) the
speed recommendation applies to tokens per second. Where it differs from the recommended
batch, `efficiency_text` says what each costs in time and energy per 10^9 tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from throughput_schema import noise as spread
from throughput_schema.energy import kwh

# The amount of training both batches are priced at (10^9 tokens), so the costs read side by side.
COST_TOKENS = 1e9


# The sentence collect's README (and any reader that names the batch) states beside the figures.
EFFICIENCY_SENTENCE = (
    "The most energy-efficient stable batch has the lowest median joules per token, as the GPU "
    "board's own energy counter measured them over the measurement windows (not the node, not "
    "cooling); batches whose tokens per joule are within T of it are listed with it, and where it "
    "is not the recommended batch, both are priced per 10^9 tokens in GPU-hours and kWh."
)


class Efficiency(msgspec.Struct, frozen=True, kw_only=True):
    batch: int
    joules_per_token: float
    tokens_per_second: float
    # Stable batches whose tokens per joule are within the threshold of the best, ascending.
    equally_efficient: list[int] = []
    # The recommended batch's figures, for the cost comparison; None where it measured no energy.
    recommended_joules_per_token: float | None = None


def most_efficient(
    joules_per_token: Mapping[int, float | None],
    rates: Mapping[int, float],
    threshold: float,
    *,
    unstable: frozenset[int] | set[int] = frozenset(),
    recommended: int | None = None,
) -> Efficiency | None:
    """`joules_per_token` and `rates` by batch; None where no stable point measured energy
    (a figure of zero or less is a broken counter, the audit's to report, never the best)."""
    stable = {b: j for b, j in joules_per_token.items() if j is not None and j > 0 and b not in unstable and b in rates}
    if not stable:
        return None
    best = min(stable, key=lambda b: (stable[b], b))
    tied = sorted(b for b, j in stable.items() if spread.within(1.0 / j, 1.0 / stable[best], threshold))
    return Efficiency(
        batch=best,
        joules_per_token=stable[best],
        tokens_per_second=rates[best],
        equally_efficient=tied,
        recommended_joules_per_token=joules_per_token.get(recommended) if recommended is not None else None,
    )


def cost(tokens_per_second: float, joules_per_token: float) -> str:
    """What COST_TOKENS tokens take at a point: GPU-hours (one GPU per point) and kWh."""
    return f"{COST_TOKENS / tokens_per_second / 3600:,.2f} GPU-hours and {kwh(COST_TOKENS * joules_per_token):,.1f} kWh"


def efficiency_text(
    e: Efficiency, threshold: float, recommended_batch: int, recommended_tokens_per_second: float
) -> str:
    """The most efficient batch beside the recommended one, and, where they differ, each one's cost."""
    within = f"within {100 * threshold:.2f}%: {' '.join(map(str, e.equally_efficient))}"
    if e.batch == recommended_batch:
        return f"also the most energy-efficient stable batch ({e.joules_per_token:.4g} J/token; {within})"
    head = f"most energy-efficient stable batch {e.batch} ({e.joules_per_token:.4g} J/token; {within})"
    if e.recommended_joules_per_token is None:
        return f"{head}; batch {recommended_batch} measured no energy"
    return (
        f"{head}; per 10^9 tokens batch {recommended_batch} takes "
        f"{cost(recommended_tokens_per_second, e.recommended_joules_per_token)}, batch {e.batch} takes "
        f"{cost(e.tokens_per_second, e.joules_per_token)}"
    )
