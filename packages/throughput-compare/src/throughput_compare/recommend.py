"""A batch recommendation per curve: of the stable batches whose rate the noise cannot
tell apart from the fastest, the smallest (less memory, more updates per token).

`recommend` takes plain numbers, not campaign files, so status, collect and the
report can show the same recommendation from what they already hold.
"""

from __future__ import annotations

from collections.abc import Mapping

from throughput_compare import spread
from throughput_compare.records import Recommendation


def recommend(
    curve: str,
    rates: Mapping[int, float],
    threshold: float,
    *,
    unstable: frozenset[int] | set[int] = frozenset(),
    reserved_bytes: Mapping[int, int | None] | None = None,
    gpu_memory_bytes: int | None = None,
    first_oom_batch: int | None = None,
) -> Recommendation:
    """`rates`: tokens/s by batch; `threshold`: the relative noise (0.03 for 3%).

    The headroom is the GPU's memory less the recommended batch's reserved peak; with
    `first_oom_batch` it says how far the recommendation is from the memory limit."""
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
    )
