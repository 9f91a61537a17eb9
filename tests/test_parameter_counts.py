"""The report's own parameter count (throughput_report.architecture) against the model the
worker really builds, tensor by tensor, for every preset in configs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_report.architecture import count_parameters, weight_shapes
from throughput_schema.recipe import load_recipe

torch = pytest.importorskip("torch")
from tiny_llm.model import build_model  # noqa: E402

pytestmark = pytest.mark.slow  # builds the real models

PRESETS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", PRESETS, ids=[p.stem for p in PRESETS])
def test_report_count_equals_the_real_models_numel(config):
    cfg = load_recipe(config).model
    model = build_model(cfg, device="meta")
    real = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert weight_shapes(cfg) == real
    assert count_parameters(cfg) == sum(p.numel() for p in model.parameters())
