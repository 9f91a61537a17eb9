"""The audit's own parameter count and FLOPs per token, derived by its own route, against the
schema's tensor table for every preset (the schema's tests pin that table to the published
counts; the presets between them turn every knob: kv heads, head size, untied head, q/k/v
bias, q/k norm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_audit.points import _params, point_flops_per_token
from throughput_schema.recipe import load_recipe
from throughput_schema.shape import flops_per_token, parameter_count

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
PRESETS = sorted(CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_the_audit_and_the_schemas_table_agree_on_every_preset(path):
    recipe = load_recipe(path)
    context = recipe.model.context_length
    assert _params(recipe) == parameter_count(recipe.model)
    assert point_flops_per_token(recipe, context) == flops_per_token(recipe.model)
