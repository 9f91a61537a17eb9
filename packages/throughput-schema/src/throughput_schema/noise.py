"""The noise arithmetic of comparisons and batch recommendations: medians, relative
spreads, a ratio's uncertainty and the noise threshold a verdict is read against.

Here, in the schema, because throughput-compare, the sweep's status and collect, the
spot check, the audit and the report all state the same threshold. Kept apart from the
worker's and the audit's own arithmetic on purpose: it is re-derived from the raw window
rates rather than trusting either.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

FASTER = "faster"
SLOWER = "slower"
SAME = "same"

# Stated in comparison.md beside the numbers they produced.
WINDOW_SPREAD_FORMULA = "s = stdev(window tokens/s) / median(window tokens/s) (sample stdev; 0 with one window)"
RATIO_FORMULA = "r = B/A of the recorded tokens/s; u(r) = r * sqrt(s_A^2 + s_B^2)"
RUN_TO_RUN_FORMULA = "d = (max - min) / median of the tokens/s of a point's successful attempts"
THRESHOLD_FORMULA = (
    "T = max(largest s of A's stable points, largest s of B's stable points, largest d of A, largest d of B)"
)
VERDICT_RULE = "faster if r - 1 > max(T, u(r)/r); slower if 1 - r > max(T, u(r)/r); else the same within noise"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def relative_spread(rates: Sequence[float]) -> float:
    """Sample standard deviation over median; 0 when there are fewer than two rates."""
    if len(rates) < 2:
        return 0.0
    return statistics.stdev(rates) / statistics.median(rates)


def run_to_run_spread(rates: Sequence[float]) -> float | None:
    """Range over median of one point's repeated measurements; None when measured once."""
    if len(rates) < 2:
        return None
    return (max(rates) - min(rates)) / statistics.median(rates)


def ratio_with_uncertainty(rate_a: float, rate_b: float, spread_a: float, spread_b: float) -> tuple[float, float]:
    """B/A and its absolute uncertainty, relative spreads combined in quadrature."""
    ratio = rate_b / rate_a
    return ratio, ratio * math.hypot(spread_a, spread_b)


def noise_threshold(spreads: Sequence[float | None]) -> float:
    """The largest of the relative spreads given (None entries are spreads not measured)."""
    measured = [s for s in spreads if s is not None]
    return max(measured, default=0.0)


def verdict(ratio: float, uncertainty: float, threshold: float) -> str:
    """Faster or slower only when the change exceeds both the stated threshold and the
    point's own uncertainty, so a noisy point is never called a change."""
    bar = max(threshold, uncertainty / ratio)
    if ratio - 1.0 > bar:
        return FASTER
    if 1.0 - ratio > bar:
        return SLOWER
    return SAME


def within(rate: float, best: float, threshold: float) -> bool:
    """A rate the noise cannot tell apart from `best`."""
    return rate >= best * (1.0 - threshold)
