"""Each curve's batch recommendation, from the curves `derive` made: the schema's
`campaign_recommendations` over the points that count, so status, collect and the spot
check recommend what throughput-compare and the report recommend from the same files."""

from __future__ import annotations

import dataclasses

from throughput_schema.comparison import Recommendation
from throughput_schema.recommendation import PointRate, campaign_recommendations, gpu_memory_bytes, point_rate
from throughput_sweep.curves import Curve


def _rated(curve: Curve) -> tuple[list[PointRate], list]:
    points, results = [], []
    for b in curve.fitting:
        info = curve.points[b]
        result = info.rated
        assert result is not None, "a fitting point has the result it fits by"
        repeats = [i.tokens_per_second for i in curve.attempts if i.batch == b and i.status == "ok"]
        point = point_rate(curve.name, b, result, [r for r in repeats if r is not None])
        if point is not None:
            # The curve's own reading of instability (an optimizer point's timing counts too).
            points.append(dataclasses.replace(point, unstable=info.unstable))
            results.append(result)
    return points, results


def recommendations(curves: list[Curve]) -> dict[str, Recommendation]:
    """By curve name, in the curves' order; the threshold is the campaign's own."""
    points, results = [], []
    for curve in curves:
        p, r = _rated(curve)
        points += p
        results += r
    return campaign_recommendations(
        points, first_oom={c.name: c.first_oom for c in curves}, gpu_memory_bytes=gpu_memory_bytes(results)
    )
