"""The shape a recipe implies: its tensors, parameter count and FLOPs per token, knob by knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from throughput_schema.configs import Llama3RopeScaling, ModelConfig
from throughput_schema.recipe import load_recipe
from throughput_schema.shape import flops_per_token, parameter_count, weight_shapes

CONFIGS = Path(__file__).resolve().parents[3] / "configs"

# Every preset that existed before the knobs: the counts and FLOPs it has always had.
EXISTING = {
    "tiny": (1_426_048, 8_949_504),
    "20m": (19_912_000, 135_200_640),
    "50m": (50_292_288, 330_065_280),
    "90m": (89_884_800, 594_359_040),
    "250m": (251_943_360, 1_629_624_960),
    "500m": (516_814_080, 3_289_628_160),
}


@pytest.mark.parametrize("name", sorted(EXISTING))
def test_existing_presets_keep_their_counts_and_flops(name):
    model = load_recipe(CONFIGS / f"{name}.yaml").model
    assert (parameter_count(model), flops_per_token(model)) == EXISTING[name]


# The small Llama-family presets: each model's published parameter count (its Hugging Face
# model card), and FLOPs per token at context 2048.
PUBLIC = {
    "smollm2-135m": (134_515_008, 1_231_763_328),
    "smollm2-360m": (361_821_120, 2_925_901_440),
    "tinyllama-1.1b": (1_100_048_384, 7_314_370_560),
    "llama-3.2-1b": (1_235_814_400, 8_220_192_768),
    "qwen2.5-0.5b": (494_032_768, 3_492_678_912),
    "qwen3-0.6b": (596_049_920, 4_985_585_664),
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_presets_have_their_published_counts(name):
    path = CONFIGS / f"{name}.yaml"
    model = load_recipe(path, ["model.context_length=2048", "training.batch_tokens=8192"]).model
    assert (parameter_count(model), flops_per_token(model)) == PUBLIC[name]
    # The first comment line states the exact count, as in every preset.
    assert path.read_text().startswith(f"# {PUBLIC[name][0]:,} parameters")


BASE = ModelConfig(n_layers=2, d_model=96, n_heads=4, ffn_dim=256, context_length=128, vocab_size=1000, head_dim=32)


def _layer0(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {k.removeprefix("blocks.0."): v for k, v in weight_shapes(model).items() if k.startswith("blocks.0.")}


def test_grouped_query_attention_narrows_k_and_v_only():
    gqa = replace(BASE, n_kv_heads=2)
    # q: 4 heads x 32, k and v: 2 heads x 32 each; the output projection reads all query heads.
    assert _layer0(gqa)["attn.qkv.weight"] == (4 * 32 + 2 * 2 * 32, 96)
    assert _layer0(gqa)["attn.proj.weight"] == (96, 4 * 32)
    assert parameter_count(BASE) - parameter_count(gqa) == 2 * 2 * (2 * 32) * 96


def test_free_head_dim_sets_the_attention_width_and_its_flops():
    wide = replace(BASE, head_dim=64)  # 4 x 64 = 256 != d_model 96
    assert _layer0(wide)["attn.qkv.weight"] == (3 * 256, 96)
    assert _layer0(wide)["attn.proj.weight"] == (96, 256)
    assert flops_per_token(wide) == 6 * parameter_count(wide) + 12 * 2 * 256 * 128


def test_biases_and_qk_norm_add_their_vectors():
    knobs = replace(BASE, n_kv_heads=1, qkv_bias=True, qk_norm=True)
    layer = _layer0(knobs)
    assert layer["attn.qkv.bias"] == (4 * 32 + 2 * 32,)
    assert layer["attn.q_norm.weight"] == layer["attn.k_norm.weight"] == (32,)
    assert "attn.proj.bias" not in layer
    plain = replace(BASE, n_kv_heads=1)
    assert parameter_count(knobs) - parameter_count(plain) == 2 * (4 * 32 + 2 * 32 + 2 * 32)


def test_untied_head_is_a_tensor_and_a_matmul_but_the_embedding_is_a_lookup():
    untied = replace(BASE, tie_embeddings=False)
    assert weight_shapes(untied)["lm_head.weight"] == (1000, 96)
    assert "lm_head.weight" not in weight_shapes(BASE)
    assert parameter_count(untied) == parameter_count(BASE) + 1000 * 96
    # The untied input embedding is a lookup: the FLOPs are the tied model's.
    assert flops_per_token(untied) == flops_per_token(BASE)


def test_rope_scaling_changes_no_shape():
    scaling = Llama3RopeScaling(
        factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    scaled = replace(BASE, rope_scaling=scaling)
    assert weight_shapes(scaled) == weight_shapes(BASE) and flops_per_token(scaled) == flops_per_token(BASE)


@pytest.mark.parametrize("name, windowed, globals_", [("gemma-3-270m", 15, 3), ("gemma-3-1b", 22, 4)])
def test_a_windowed_layer_counts_the_keys_its_window_sees(name, windowed, globals_):
    """Gemma 3's published counts, and attention FLOPs of 12 x heads x head_dim a key per layer:
    the context in a global layer, min(context, 512) in a windowed one, never halved."""
    published = {"gemma-3-270m": 268_098_176, "gemma-3-1b": 999_885_952}[name]
    for context in (256, 2048, 4096):
        model = load_recipe(
            CONFIGS / f"{name}.yaml", [f"model.context_length={context}", f"training.batch_tokens={4 * context}"]
        ).model
        keys = globals_ * context + windowed * min(context, 512)
        assert parameter_count(model) == published
        assert flops_per_token(model) == 6 * published + 12 * 4 * 256 * keys
        # Every layer global (the override that measures what the window saves): today's formula.
        everywhere = replace(model, sliding_layers=())
        assert flops_per_token(everywhere) == 6 * published + 12 * (windowed + globals_) * 4 * 256 * context


def test_sandwich_norm_adds_two_norms_a_layer_and_the_gemma_knobs_no_other_tensor():
    gemma = replace(BASE, sandwich_norm=True, norm_offset=True, embed_scale=True, mlp_activation="gelu_tanh")
    assert _layer0(gemma)["attn_post_norm.weight"] == _layer0(gemma)["mlp_post_norm.weight"] == (96,)
    assert parameter_count(gemma) == parameter_count(BASE) + 2 * 2 * 96
    scaled = replace(BASE, attn_scale_dim=24, rope_local_theta=10.0, sliding_window=64)  # no layer windowed
    assert weight_shapes(scaled) == weight_shapes(BASE) and flops_per_token(scaled) == flops_per_token(BASE)
