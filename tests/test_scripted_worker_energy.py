"""The scripted test worker's planned meter: plan key `watts` gives results whose energy
comes through the real protocol and summary; without it, energy null with the reason."""

from __future__ import annotations

import json

import pytest

import scripted_worker
from campaign_helpers import ROOT
from throughput_schema import WorkerResult, read

POINT = ["--config", str(ROOT / "configs" / "20m.yaml"), "--set", "training.micro_batch_size=8"]


def run(tmp_path, monkeypatch, plan: dict, *extra: str) -> WorkerResult:
    (tmp_path / "plan.json").write_text(json.dumps({"ok_seconds": 0, **plan}))
    monkeypatch.setenv(scripted_worker.PLAN_ENV, str(tmp_path / "plan.json"))
    out = tmp_path / "result.json"
    args = ["benchmark-throughput-worker", *POINT, "--output", str(out), "--window-seconds", "1", *extra]
    code = scripted_worker.main(args)
    assert code in (0, 3)
    return read(out, WorkerResult)


def test_plan_watts_give_real_shaped_energy(tmp_path, monkeypatch):
    r = run(tmp_path, monkeypatch, {"default": "ok", "watts": 600})
    e = r.energy
    assert e is not None and r.energy_unavailable == ""
    assert e.source.counter == scripted_worker.SCRIPTED_METER and "nvml" not in e.source.counter
    assert e.mean_watts == pytest.approx(600, rel=1e-4) and e.power_limit_watts == 700
    assert e.setup_joules == pytest.approx(60) and e.setup_seconds == scripted_worker.SETUP_SECONDS
    assert e.interval == "window"
    tokens = 8 * r.recipe.model.context_length
    for w in r.windows:
        assert w.energy.joules == pytest.approx((w.energy.end_mj - w.energy.start_mj) / 1000)
        assert w.energy.joules_per_token == pytest.approx(w.energy.joules / (w.updates * tokens))
    # Same power, so energy per token is power over throughput.
    assert e.joules_per_token == pytest.approx(600 / r.throughput.tokens_per_second, rel=0.02)


def test_a_point_overrides_the_plan_watts_and_limit(tmp_path, monkeypatch):
    plan = {"default": "ok", "watts": 600, "points": {"20m-c512-b8": {"outcome": "ok", "watts": 300}}}
    plan["power_limit_watts"] = 350
    r = run(tmp_path, monkeypatch, plan)
    assert r.energy.mean_watts == pytest.approx(300, rel=1e-4) and r.energy.power_limit_watts == 350


def test_optimizer_timing_records_the_span(tmp_path, monkeypatch):
    r = run(tmp_path, monkeypatch, {"default": "ok", "watts": 500}, "--optimizer-timing")
    assert r.mode == "optimizer-timing" and r.energy.interval == "span"


def test_without_watts_energy_is_null_with_the_reason(tmp_path, monkeypatch):
    r = run(tmp_path, monkeypatch, {"default": "ok"})
    assert r.energy is None and r.energy_unavailable == scripted_worker.NO_WATTS
    assert all(w.energy is None for w in r.windows)


def test_energy_off_and_failed_points_have_none(tmp_path, monkeypatch):
    r = run(tmp_path, monkeypatch, {"default": "ok", "watts": 600}, "--energy", "off")
    assert r.energy is None and r.energy_unavailable == "energy counter turned off (--energy off)"
    r = run(tmp_path, monkeypatch, {"default": "cuda_oom", "watts": 600})
    assert r.energy is None and r.energy_unavailable == "the point was not measured to the end (cuda_oom)"
