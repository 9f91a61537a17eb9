"""The most energy-efficient stable batch beside the recommended one: the lowest median
joules per token of the stable points, the batches within the noise threshold of it, and
what each of the two costs where they differ; nothing of it where no point measured energy."""

from __future__ import annotations

import pytest

from campaign_builder.results import preset
from throughput_schema import Ok, Throughput, WorkerResult, codec
from throughput_schema.comparison import Recommendation
from throughput_schema.efficiency import Efficiency, most_efficient
from throughput_schema.energy import EnergySource, derive_window, summarize
from throughput_schema.recommendation import (
    PointRate,
    campaign_recommendations,
    point_rate,
    recommend,
    recommendation_text,
)
from throughput_schema.records import WorkerIdentity

# tokens/s and J/token by batch: 8 is the fastest, 2 the most efficient, 4 within 2% of 2's energy.
RATES = {1: 100_000.0, 2: 190_000.0, 4: 300_000.0, 8: 400_000.0}
JOULES = {1: 0.0040, 2: 0.0020, 4: 0.00203, 8: 0.0030}


def test_the_lowest_joules_per_token_of_the_stable_points_and_those_the_noise_cannot_tell_apart():
    e = most_efficient(JOULES, RATES, 0.02, recommended=8)
    assert e is not None
    assert (e.batch, e.joules_per_token, e.tokens_per_second) == (2, 0.0020, 190_000.0)
    assert e.equally_efficient == [2, 4]  # 0.0020/0.00203 = 0.985 >= 1 - 0.02; 0.0020/0.0030 is not
    assert e.recommended_joules_per_token == 0.0030
    assert most_efficient(JOULES, RATES, 0.01).equally_efficient == [2]  # 0.985 < 0.99


def test_unstable_points_and_points_without_energy_never_compete():
    e = most_efficient(JOULES, RATES, 0.02, unstable={2})
    assert e is not None and e.batch == 4 and e.equally_efficient == [4]
    e = most_efficient({**JOULES, 2: None}, RATES, 0.0)
    assert e is not None and e.batch == 4
    assert most_efficient({}, RATES, 0.02) is None
    assert most_efficient({1: None, 2: None}, RATES, 0.02) is None
    assert most_efficient(JOULES, RATES, 0.02, unstable={1, 2, 4, 8}) is None


def test_recommend_names_both_batches_and_prices_them_where_they_differ():
    r = recommend("m-c512", RATES, 0.02, joules_per_token=JOULES, first_oom_batch=16)
    assert r.recommended_batch == 8 and r.efficiency is not None and r.efficiency.batch == 2
    text = recommendation_text(r)
    # Per 10^9 tokens: hours = 1e9 / tok/s / 3600; kWh = 1e9 * J/token / 3.6e6.
    hours_8, kwh_8 = 1e9 / 400_000 / 3600, 1e9 * 0.0030 / 3.6e6
    hours_2, kwh_2 = 1e9 / 190_000 / 3600, 1e9 * 0.0020 / 3.6e6
    assert (
        f"most energy-efficient stable batch 2 (0.002 J/token; within 2.00%: 2 4); per 10^9 tokens "
        f"batch 8 takes {hours_8:,.2f} GPU-hours and {kwh_8:,.1f} kWh, batch 2 takes {hours_2:,.2f} GPU-hours "
        f"and {kwh_2:,.1f} kWh"
    ) in text
    assert text.startswith("batch 8 (400,000 tok/s): within 2.00% of the fastest (b8) are 8; ")


def test_where_the_recommended_batch_is_the_most_efficient_it_says_so_without_prices():
    joules = {**JOULES, 8: 0.0010}
    text = recommendation_text(recommend("m-c512", RATES, 0.02, joules_per_token=joules))
    assert text.endswith("; also the most energy-efficient stable batch (0.001 J/token; within 2.00%: 8)")
    assert "per 10^9 tokens" not in text


def test_a_recommended_batch_without_energy_is_named_as_such():
    joules = {**JOULES, 8: None}
    text = recommendation_text(recommend("m-c512", RATES, 0.02, joules_per_token=joules))
    assert text.endswith("; batch 8 measured no energy")


def test_without_energy_the_recommendation_is_as_before():
    with_none = recommend("m-c512", RATES, 0.02, joules_per_token={b: None for b in RATES})
    plain = recommend("m-c512", RATES, 0.02)
    assert with_none == plain and plain.efficiency is None
    assert recommendation_text(plain) == (
        "batch 8 (400,000 tok/s): within 2.00% of the fastest (b8) are 8; "
        "headroom n/a (no GPU memory recorded), no OOM measured"
    )


def _result(joules_per_token_windows: list[float] | None) -> WorkerResult:
    energy = None
    if joules_per_token_windows is not None:
        windows = [derive_window(0, round(j * 1000 * 1000), 1.0, 1000) for j in joules_per_token_windows]
        energy = summarize(windows, EnergySource(device_name="test"))
    return WorkerResult(
        worker=WorkerIdentity(module="tiny_llm"),
        outcome=Ok(),
        recipe=preset("20m"),
        parameters=1,
        throughput=Throughput(
            tokens_per_second=1000.0,
            sequences_per_second=1.0,
            window_tokens_per_second=[1000.0] * 3,
            cv=0.0,
            unstable=False,
            update_ms=1.0,
        ),
        energy=energy,
    )


def test_a_point_rate_carries_its_results_median_joules_per_token():
    assert point_rate("c", 1, _result([0.5, 0.7, 0.6])).joules_per_token == pytest.approx(0.6)
    assert point_rate("c", 1, _result(None)).joules_per_token is None
    points = [
        PointRate("c", 1, 1000.0, (1000.0, 1000.0), joules_per_token=0.6),
        PointRate("c", 2, 1900.0, (1900.0, 1900.0), joules_per_token=0.5),
    ]
    rec = campaign_recommendations(points, first_oom={"c": None})["c"]
    assert rec.recommended_batch == 2 and rec.efficiency is not None and rec.efficiency.batch == 2


def test_a_recommendation_round_trips_with_and_without_efficiency_and_older_ones_decode():
    r = Recommendation(curve="c", efficiency=Efficiency(batch=2, joules_per_token=0.5, tokens_per_second=10.0))
    assert codec.decode(codec.dumps(r), Recommendation) == r
    assert codec.decode(b'{"curve": "c", "threshold": 0.01}', Recommendation).efficiency is None
