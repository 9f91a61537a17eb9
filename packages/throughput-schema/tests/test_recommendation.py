"""The one home of the batch recommendation: a campaign's own noise threshold from its
points, each curve's recommendation against it, and the line status and collect print."""

from __future__ import annotations

import pytest

from throughput_schema import noise
from throughput_schema.comparison import Comparison, PointComparison, differing
from throughput_schema.recommendation import PointRate, campaign_noise, campaign_recommendations, recommendation_text


def test_threshold_is_the_largest_stable_window_spread_or_run_to_run_spread():
    points = [
        PointRate("m-c512", 1, 100.0, (99.0, 100.0, 101.0)),  # s = 1%
        PointRate("m-c512", 2, 180.0, (150.0, 180.0, 210.0), unstable=True),  # unstable: does not set T
        PointRate("m-c512", 4, 300.0, (300.0, 300.0), repeats=(291.0, 300.0)),  # d = 3%
    ]
    window, run_to_run = campaign_noise(points)
    assert window == pytest.approx(0.01) and run_to_run == pytest.approx(9.0 / 295.5)
    recs = campaign_recommendations(points, first_oom={"m-c512": 8, "m-c1024": None})
    assert list(recs) == ["m-c512", "m-c1024"]
    assert recs["m-c512"].threshold == pytest.approx(noise.noise_threshold([window, run_to_run]))
    assert recs["m-c512"].recommended_batch == 4 and recs["m-c1024"].recommended_batch is None


def test_smallest_of_the_equally_fast_is_recommended_with_its_headroom():
    points = [
        PointRate("m-c512", 8, 97.5, (97.5,), reserved_bytes=30 * 2**30),
        PointRate("m-c512", 16, 99.0, (99.0,), reserved_bytes=50 * 2**30),
        PointRate("m-c512", 32, 100.0, (100.0,), reserved_bytes=90 * 2**30),
    ]
    r = campaign_recommendations(points, first_oom={"m-c512": 64}, gpu_memory_bytes=140 * 2**30, threshold=0.02)[
        "m-c512"
    ]
    assert (r.fastest_batch, r.equally_fast, r.recommended_batch) == (32, [16, 32], 16)
    assert r.headroom_bytes == 90 * 2**30
    assert recommendation_text(r) == (
        "batch 16 (99 tok/s): within 2.00% of the fastest (b32) are 16 32; headroom 90.0 GiB of 140.0 GiB, first OOM at 64"
    )


def test_a_spot_check_fails_on_the_points_whose_verdict_is_a_change():
    same = PointComparison(curve="m-c512", batch_size=1, verdict=noise.SAME)
    faster = PointComparison(curve="m-c512", batch_size=2, verdict=noise.FASTER, ratio=1.1)
    assert differing(Comparison(points=[same, faster])) == [faster]
