"""A batch recommendation per curve: of the stable batches whose rate the noise cannot
tell apart from the fastest, the smallest (less memory, more updates per token).

`recommend` takes plain numbers, not campaign files, so throughput-compare, the sweep's
status and collect, the spot check and the report show the same recommendation from what
they already hold; `campaign_recommendations` does it for one campaign's points, with
that campaign's own noise threshold (`campaign_noise`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from throughput_schema import noise as spread
from throughput_schema.comparison import Recommendation
from throughput_schema.efficiency import efficiency_text, most_efficient
from throughput_schema.results import WorkerResult


def recommend(
    curve: str,
    rates: Mapping[int, float],
    threshold: float,
    *,
    unstable: frozenset[int] | set[int] = frozenset(),
    reserved_bytes: Mapping[int, int | None] | None = None,
    gpu_memory_bytes: int | None = None,
    first_oom_batch: int | None = None,
    joules_per_token: Mapping[int, float | None] | None = None,
) -> Recommendation:
    """`rates`: tokens/s by batch; `threshold`: the relative noise (0.03 for 3%).

    The headroom is the GPU's memory less the recommended batch's reserved peak; with
    `first_oom_batch` it says how far the recommendation is from the memory limit. With
    `joules_per_token` (by batch, None where a point measured no energy) it also names the
    most energy-efficient stable batch against the same threshold."""
    stable = {b: r for b, r in rates.items() if b not in unstable}
    if not stable:
        return Recommendation(curve=curve, threshold=threshold, first_oom_batch=first_oom_batch)
    fastest = max(stable, key=lambda b: (stable[b], -b))
    tied = sorted(b for b, r in stable.items() if spread.within(r, stable[fastest], threshold))
    chosen = tied[0]
    reserved = (reserved_bytes or {}).get(chosen)
    headroom = gpu_memory_bytes - reserved if gpu_memory_bytes and reserved is not None else None
    return Recommendation(
        curve=curve,
        fastest_batch=fastest,
        fastest_tokens_per_second=stable[fastest],
        threshold=threshold,
        equally_fast=tied,
        recommended_batch=chosen,
        recommended_tokens_per_second=stable[chosen],
        reserved_bytes=reserved,
        gpu_memory_bytes=gpu_memory_bytes or None,
        headroom_bytes=headroom,
        first_oom_batch=first_oom_batch,
        efficiency=most_efficient(joules_per_token or {}, stable, threshold, recommended=chosen),
    )


# The sentence the report's method notes and collect's README use for the threshold.
THRESHOLD_SENTENCE = (
    "Batches whose rate is within the noise threshold T of a curve's fastest stable batch are "
    "treated as equally fast, and the smallest of them is recommended (less memory, more updates "
    "per token); T is the campaign's largest window spread of a stable point "
    "(stdev/median of its window tokens/s), or its largest run-to-run spread where a point "
    "was measured more than once, whichever is larger."
)


@dataclass(frozen=True)
class PointRate:
    """One point as a recommendation reads it: the counting attempt's rate and windows."""

    curve: str
    batch: int
    rate: float
    window_rates: tuple[float, ...] = ()
    unstable: bool = False
    reserved_bytes: int | None = None
    # tokens/s of every successful attempt at this point, oldest first
    repeats: tuple[float, ...] = ()
    # the counting attempt's median joules per token; None where it measured no energy
    joules_per_token: float | None = None


def point_rate(curve: str, batch: int, result: WorkerResult, repeats: Iterable[float] = ()) -> PointRate | None:
    """The point as it counts, from the result its rate comes from (in an optimizer-timing
    campaign the baseline); None without a throughput."""
    t = result.throughput
    if t is None:
        return None
    memory = result.memory
    reserved = None if memory is None or memory.measurement is None else memory.measurement.reserved_bytes
    return PointRate(
        curve,
        batch,
        t.tokens_per_second,
        tuple(t.window_tokens_per_second),
        t.unstable,
        reserved,
        tuple(repeats),
        result.energy.joules_per_token if result.energy is not None else None,
    )


def gpu_memory_bytes(results: Iterable[WorkerResult]) -> int | None:
    """The GPU's memory as the results recorded it (hardware, else the memory report)."""
    found = [r.hardware.gpu_memory_bytes or (r.memory.device_total_bytes if r.memory else 0) for r in results]
    return max(found, default=0) or None


def campaign_noise(points: Iterable[PointRate]) -> tuple[float, float | None]:
    """(largest window spread of a stable point, largest run-to-run spread or None)."""
    points = list(points)
    window = spread.noise_threshold([spread.relative_spread(p.window_rates) for p in points if not p.unstable])
    repeats = [d for d in (spread.run_to_run_spread(p.repeats) for p in points) if d is not None]
    return window, max(repeats) if repeats else None


def campaign_recommendations(
    points: Iterable[PointRate],
    *,
    first_oom: Mapping[str, int | None],
    gpu_memory_bytes: int | None = None,
    threshold: float | None = None,
) -> dict[str, Recommendation]:
    """Per curve of `first_oom` (every curve, in order), its recommendation against
    `threshold`, by default the campaign's own: `noise_threshold(campaign_noise(points))`."""
    points = list(points)
    if threshold is None:
        threshold = spread.noise_threshold(campaign_noise(points))
    out = {}
    for curve, oom in first_oom.items():
        mine = [p for p in points if p.curve == curve]
        out[curve] = recommend(
            curve,
            {p.batch: p.rate for p in mine},
            threshold,
            unstable={p.batch for p in mine if p.unstable},
            reserved_bytes={p.batch: p.reserved_bytes for p in mine},
            gpu_memory_bytes=gpu_memory_bytes,
            first_oom_batch=oom,
            joules_per_token={p.batch: p.joules_per_token for p in mine},
        )
    return out


def headroom_text(r: Recommendation) -> str:
    """The headroom of a recommendation in GiB, or why there is none."""
    if r.headroom_bytes is None or r.gpu_memory_bytes is None:
        return "headroom n/a (no GPU memory recorded)"
    return f"headroom {r.headroom_bytes / 2**30:.1f} GiB of {r.gpu_memory_bytes / 2**30:.1f} GiB"


def recommendation_text(r: Recommendation) -> str:
    """One line: the batch, the equally fast set against the threshold, the headroom to the
    first OOM, and where energy was measured, the most energy-efficient stable batch."""
    if r.recommended_batch is None or r.recommended_tokens_per_second is None:
        return "no stable point to recommend"
    oom = "no OOM measured" if r.first_oom_batch is None else f"first OOM at {r.first_oom_batch}"
    energy = (
        ""
        if r.efficiency is None
        else f"; {efficiency_text(r.efficiency, r.threshold, r.recommended_batch, r.recommended_tokens_per_second)}"
    )
    return (
        f"batch {r.recommended_batch} ({r.recommended_tokens_per_second:,.0f} tok/s): within "
        f"{100 * r.threshold:.2f}% of the fastest (b{r.fastest_batch}) are {' '.join(map(str, r.equally_fast))}; "
        f"{headroom_text(r)}, {oom}{energy}"
    )
