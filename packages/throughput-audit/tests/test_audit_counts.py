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


def test_the_audit_counts_a_windowed_layer_s_keys_by_its_own_route():
    """gemma-3-1b at context 4096: 4 global layers see 4096 keys, 22 windowed ones 512."""
    recipe = load_recipe(CONFIGS / "gemma-3-1b.yaml", ["model.context_length=4096", "training.batch_tokens=16384"])
    assert point_flops_per_token(recipe, 4096) == 6 * 999_885_952 + 12 * 4 * 256 * (4 * 4096 + 22 * 512)
    assert point_flops_per_token(recipe, 4096) == flops_per_token(recipe.model)
