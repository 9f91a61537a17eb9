"""The model's parameter count equals the recipe's, for every preset (meta device: no memory)."""

from pathlib import Path

import pytest
import torch

from throughput_schema.recipe import load_recipe, parameter_count
from tiny_llm.model import build_model

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_parameter_count_matches_recipe(config):
    recipe = load_recipe(config)
    model = build_model(recipe.model, "meta")
    assert sum(p.numel() for p in model.parameters()) == parameter_count(recipe.model)


def test_presets_present():
    assert {"tiny", "20m", "250m", "500m"} <= {p.stem for p in CONFIGS}


def test_tied_embedding_and_loss_shape():
    recipe = load_recipe(CONFIGS[0].parent / "tiny.yaml", ["model.vocab_size=256"])
    model = build_model(recipe.model, "cpu")
    assert model.lm_head.weight is model.embed.weight
    idx = torch.randint(0, 256, (2, 16))
    logits = model(idx)
    assert logits.shape == (2, 16, 256)
    loss = model(idx, torch.randint(0, 256, (2, 16)))
    # Random init: the loss starts near ln(vocab).
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5


def test_causal():
    recipe = load_recipe(CONFIGS[0].parent / "tiny.yaml", ["model.vocab_size=256"])
    model = build_model(recipe.model, "cpu")
    idx = torch.randint(0, 256, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 256
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])
