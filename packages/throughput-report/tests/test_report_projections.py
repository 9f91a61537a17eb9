"""The projection formulas against a small table computed by hand."""

from __future__ import annotations

import pytest

from campaign_builder.gpu import CONFIGS
from throughput_report import projections as pj
from throughput_schema.recipe import ceil_updates, load_recipe, parameter_count

# P, B, L, R | T = 20·P/R, 1e9/R, U = ceil(20·P/(B·L)), U·B·L, U·B·L/R  (all worked out by hand)
HAND = [
    # 20m: 20·19,912,000 = 398,240,000 tokens; 65,536 × 6,076 = 398,196,736 < budget, so U = 6,077.
    (19_912_000, 128, 512, 1_000_000, 398.24, 1000.0, 6_077, 398_262_272, 398.262272),
    # 500m: 10,336,281,600 tokens / 65,536 = 157,719.1...; 157,720 × 65,536 = 10,336,337,920.
    (516_814_080, 16, 4096, 100_000, 103_362.816, 10_000.0, 157_720, 10_336_337_920, 103_363.3792),
    # 20,000,000 / 16,384 = 1,220.7 -> 1,221 updates, 20,004,864 tokens.
    (1_000_000, 8, 2048, 50_000, 400.0, 20_000.0, 1_221, 20_004_864, 400.09728),
    # Exact: 20 × 16,384 = 327,680 = 20 updates of 16,384 tokens; R = 327,680 tokens/s -> 1 s.
    (16_384, 32, 512, 327_680, 1.0, 1e9 / 327_680, 20, 327_680, 1.0),
]


@pytest.mark.parametrize("P,B,L,R,T,per_billion,U,tokens,seconds", HAND)
def test_hand_checked_projections(P, B, L, R, T, per_billion, U, tokens, seconds):
    assert pj.budget_tokens(P) == 20 * P
    assert pj.ideal_seconds(P, R) == pytest.approx(T, rel=1e-12)
    assert pj.seconds_per_billion(R) == pytest.approx(per_billion, rel=1e-12)
    assert pj.complete_updates(P, B, L) == U == ceil_updates(P, B * L)
    assert U * B * L == tokens
    assert U * B * L / R == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    "T,f,k,expected",
    [
        (100.0, 0.2, 2, 90.0),
        (100.0, 0.2, 4, 85.0),
        (100.0, 0.0, 4, 100.0),
        (100.0, 0.5, 1, 100.0),
        (3600.0, 0.1, 2, 3420.0),
    ],
)
def test_counterfactual_optimizer_speedup(T, f, k, expected):
    assert pj.counterfactual_seconds(T, f, k) == pytest.approx(expected)


def test_preset_parameter_counts_used_by_the_hand_table():
    assert parameter_count(load_recipe(CONFIGS / "20m.yaml").model) == 19_912_000
    assert parameter_count(load_recipe(CONFIGS / "500m.yaml").model) == 516_814_080


def test_context_comparison_holds_tokens_per_update_fixed(pair):
    from throughput_report.checks import run_checks
    from throughput_report.inputs import load_campaign
    from throughput_report.pairing import pair_campaigns

    pairs = pair_campaigns([load_campaign(pair[0])], [load_campaign(pair[1])])
    run_checks(pairs)
    proj = pj.project(pairs, tokens_per_update=16_384)
    assert {(m, c) for m, c in proj.comparison} == {(m, c) for m in ("20m", "90m") for c in (512, 1024)}
    for (_model, context), p in proj.comparison.items():
        assert p.batch * context == 16_384
        assert p.budget_tokens == 20 * p.parameters
        assert p.projected_seconds == pytest.approx(20 * p.parameters / p.tokens_per_second)
        assert p.counterfactual_2x_seconds == pytest.approx(p.projected_seconds * (1 - p.optimizer_share / 2))
    # Each model's budget is the same at every context.
    for model in ("20m", "90m"):
        assert len({p.budget_tokens for p in proj.points if p.model == model}) == 1
    # The window range brackets the median-rate time.
    for p in proj.points:
        assert p.projected_seconds_fastest_window <= p.projected_seconds <= p.projected_seconds_slowest_window


# P, J/token, G | E = 20·P·J/token / 3.6e6 kWh, emissions E·G / 1000 kg  (worked out by hand)
ENERGY_HAND = [
    # 20 × 19,912,000 = 398,240,000 tokens × 0.5 J = 199,120,000 J = 55.3111... kWh; × 385 g = 21.2948 kg.
    (19_912_000, 0.5, 385.0, 55.311_111_111, 21.294_777_778),
    # 20 × 516,814,080 × 0.18 J = 1,860,530,688 J / 3.6e6 = 516.81408 kWh; × 50 g = 25.840704 kg.
    (516_814_080, 0.18, 50.0, 516.81408, 25.840704),
    # 20 × 16,384 × 1.8 J = 589,824 J = 0.16384 kWh; × 1,000 g = 0.16384 kg.
    (16_384, 1.8, 1000.0, 0.16384, 0.16384),
]


@pytest.mark.parametrize("P,jpt,G,kwh,kg", ENERGY_HAND)
def test_hand_checked_energy(P, jpt, G, kwh, kg):
    from throughput_report import energy

    assert energy.projected_kwh(P, jpt) == pytest.approx(kwh, rel=1e-9)
    assert energy.co2e_kg(energy.projected_kwh(P, jpt), G) == pytest.approx(kg, rel=1e-9)


def test_energy_figures_print_without_exponents():
    from throughput_report.energy import fmt_co2e, fmt_kwh

    assert [fmt_kwh(v) for v in (0.0235, 0.4661, 3.614, 55.31, 1234.5)] == [
        "23.5 Wh",
        "466 Wh",
        "3.61 kWh",
        "55.3 kWh",
        "1,234 kWh",
    ]
    assert [fmt_co2e(v) for v in (0.00906, 1.39, 21.29, 4321.0)] == ["9.06 g", "1.39 kg", "21.3 kg", "4,321 kg"]
