"""The protocol's arithmetic, torch-free so it is tested with controlled times.

Rate per window = N·B·L / seconds; reported = median window rate; stability by the
sample coefficient of variation (stdev with n-1, over the mean) against 5%.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def sample_cv(values: Sequence[float]) -> float:
    """stdev (n-1) / mean; 0 for fewer than two values (nothing to vary)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return float(statistics.stdev(values) / mean) if mean > 0 else math.inf


def window_rate(updates: int, seconds: float, tokens_per_update: int) -> float:
    """Tokens per second of one window: N·B·L / seconds."""
    return updates * tokens_per_update / seconds


def updates_per_window(
    calibration_updates: int, calibration_seconds: float, window_seconds: float, minimum: int
) -> int:
    """A fixed N targeting `window_seconds`, from the calibration's mean update time, at least `minimum`."""
    per_update = calibration_seconds / calibration_updates
    if per_update <= 0:
        return minimum
    return max(minimum, round(window_seconds / per_update))


def needs_more_windows(cv: float, threshold: float) -> bool:
    """Above the threshold (strictly) the guide (docs/guide.md) adds windows, or flags the point."""
    return cv > threshold


def burst_size(seconds_per_update: float, burst_seconds: float) -> int:
    """Replays per synchronised burst targeting `burst_seconds` (at least 1)."""
    if seconds_per_update <= 0:
        return 1
    return max(1, round(burst_seconds / seconds_per_update))


def split_bursts(updates: int, size: int) -> list[int]:
    """A window of `updates` replays as bursts of `size` (the last one may be shorter)."""
    full, rest = divmod(updates, size)
    return [size] * full + ([rest] if rest else [])


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """A window's optimizer ms: each burst's last-replay sample weighted by its update count."""
    total = sum(weights)
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total


def mfu(tokens_per_second: float, flops_per_token: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: flops_per_token · R / peak; None when the peak is unknown."""
    if not peak_flops:
        return None
    return flops_per_token * tokens_per_second / peak_flops
