"""The model equals transformers' LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
SmolLM3ForCausalLM, Olmo2ForCausalLM and Gemma3ForCausalLM on the same weights (FP32, CPU), for small shapes that turn each knob: the same logits and loss, the
same gradient for every parameter after one backward, and the same parameter count.

The weights are transformers' own initialisation, each tensor then perturbed (norm gains away
from 1, biases away from 0), converted with `tiny_llm.hf_weights.from_transformers`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from throughput_schema import ModelConfig
from throughput_schema.configs import Llama3RopeScaling
from throughput_schema.recipe import load_recipe, parameter_count
from throughput_schema.shape import weight_shapes
from tiny_llm.hf_weights import ConversionError, from_transformers, transformers_config, transformers_model
from tiny_llm.model import build_model, rope_tables

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))
LLAMA3 = Llama3RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
BASE = dict(n_layers=2, d_model=64, n_heads=4, ffn_dim=96, context_length=32, vocab_size=101, head_dim=16)
CASES = {
    "plain": ModelConfig(**BASE),
    "gqa-4-2": ModelConfig(**BASE, n_kv_heads=2),
    "mqa": ModelConfig(**BASE, n_kv_heads=1),
    "untied": ModelConfig(**BASE, n_kv_heads=2, tie_embeddings=False),
    "head-dim-24": ModelConfig(**{**BASE, "head_dim": 24}, n_kv_heads=2),  # 4 x 24 != 64
    "qkv-bias": ModelConfig(**BASE, n_kv_heads=2, qkv_bias=True),  # Qwen2
    "qk-norm": ModelConfig(**{**BASE, "head_dim": 32}, n_kv_heads=2, qk_norm=True),  # Qwen3
    "llama3-rope": ModelConfig(**BASE, n_kv_heads=2, rope_theta=500_000.0, rope_scaling=LLAMA3),
    "all-qwen2": ModelConfig(
        **{**BASE, "head_dim": 24}, n_kv_heads=1, qkv_bias=True, tie_embeddings=False, rope_scaling=LLAMA3
    ),  # fmt: skip
    # SmolLM3: grouped-query attention, tied, the last of every two layers without RoPE (four
    # layers, so that layers of both kinds follow each other).
    "smollm3": ModelConfig(**{**BASE, "n_layers": 4}, n_kv_heads=2, rope_theta=5_000_000.0, nope_layers=(1, 3)),
    # OLMo 2: norms on the sublayers' outputs, q and k each normed whole (k narrower: 2 kv heads
    # of 24, so that a per-head norm or a q-wide k norm cannot pass), untied head.
    "olmo2": ModelConfig(
        **{**BASE, "head_dim": 24}, n_kv_heads=2, tie_embeddings=False, qk_norm_whole=True, post_norm=True
    ),
    # Gemma 3: a window of 8 in three of four layers (context 32, so the window matters), their
    # own RoPE base, (1 + weight) norms, four a layer, GeGLU, embeddings scaled by sqrt(64) and
    # scores by 24 ** -0.5 (not head_dim's 16), one kv head, per-head q/k norms.
    "gemma3": ModelConfig(
        **{**BASE, "n_layers": 4},
        n_kv_heads=1,
        rope_theta=1_000_000.0,
        qk_norm=True,
        sliding_window=8,
        sliding_layers=(0, 1, 3),
        rope_local_theta=10_000.0,
        norm_offset=True,
        sandwich_norm=True,
        mlp_activation="gelu_tanh",
        embed_scale=True,
        attn_scale_dim=24,
    ),  # fmt: skip
}
CLASSES = {
    "qkv-bias": "Qwen2ForCausalLM",
    "all-qwen2": "Qwen2ForCausalLM",
    "qk-norm": "Qwen3ForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}


def twins(cfg: ModelConfig):
    """(transformers model, our model) holding the same FP32 weights."""
    torch.manual_seed(0)
    hf = transformers_model(cfg).float()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    ours = build_model(cfg, "cpu", seed=7)
    ours.load_state_dict(from_transformers(hf.state_dict(), cfg))
    return hf, ours


def batch(cfg: ModelConfig):
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, cfg.vocab_size, (3, cfg.context_length + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def hf_loss(hf, inputs, targets):
    logits = hf(input_ids=inputs).logits
    return logits, F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


@pytest.mark.parametrize("name", CASES)
def test_same_logits_and_loss(name):
    cfg = CASES[name]
    hf, ours = twins(cfg)
    assert type(hf).__name__ == CLASSES.get(name, "LlamaForCausalLM")
    inputs, targets = batch(cfg)
    want_logits, want_loss = hf_loss(hf, inputs, targets)
    torch.testing.assert_close(ours(inputs), want_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(inputs, targets), want_loss, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_same_gradients(name):
    cfg = CASES[name]
    hf, ours = twins(cfg)
    inputs, targets = batch(cfg)
    hf_loss(hf, inputs, targets)[1].backward()
    ours(inputs, targets).backward()
    # transformers' gradients in our names, through the same converter as the weights.
    want = from_transformers({n: p.grad for n, p in hf.named_parameters()}, cfg)
    got = dict(ours.named_parameters())  # a tied head appears once, as embed.weight
    assert set(got) | {"lm_head.weight"} == set(want)
    for n, p in got.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, n
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-6, msg=f"gradient of {n}")


@pytest.mark.parametrize("name", CASES)
def test_same_parameter_count(name):
    cfg = CASES[name]
    built = sum(p.numel() for p in build_model(cfg, "meta").parameters())
    with torch.device("meta"):
        assert built == transformers_model(cfg).num_parameters() == parameter_count(cfg)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_preset_has_transformers_count_and_table(config):
    """Each preset's built model: transformers' num_parameters() of the same shape, and the
    schema's weight table tensor for tensor (meta device: no memory)."""
    cfg = load_recipe(config).model
    model = build_model(cfg, "meta")
    assert {n: tuple(p.shape) for n, p in model.named_parameters()} == weight_shapes(cfg)
    with torch.device("meta"):
        assert sum(p.numel() for p in model.parameters()) == transformers_model(cfg).num_parameters()


def test_llama3_rope_tables_equal_transformers_at_llama_3_2_1b():
    """Llama-3.2-1B's RoPE (theta 500000, factor 32, 1, 4, 8192) against transformers' own function."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = Llama3RopeScaling(
        factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    cfg = ModelConfig(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192, context_length=2048,
                      vocab_size=128256, rope_theta=500_000.0, rope_scaling=scaling)  # fmt: skip
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](transformers_config(cfg), "cpu")
    angles = torch.outer(torch.arange(2048, dtype=torch.float32), inv_freq)
    cos, sin = rope_tables(cfg.head_dim, 2048, cfg.rope_theta, scaling=scaling)
    torch.testing.assert_close(cos, torch.cat((angles, angles), -1).cos(), rtol=0, atol=0)
    torch.testing.assert_close(sin, torch.cat((angles, angles), -1).sin(), rtol=0, atol=0)
    plain, _ = rope_tables(cfg.head_dim, 2048, cfg.rope_theta)
    assert not torch.equal(cos, plain)  # the scaling changed something


def test_converter_refuses_what_the_recipe_lacks():
    cfg = CASES["gqa-4-2"]
    torch.manual_seed(0)
    state = transformers_model(cfg).state_dict()
    with pytest.raises(ConversionError, match="o_proj.bias"):
        from_transformers({**state, "model.layers.0.self_attn.o_proj.bias": torch.zeros(64)}, cfg)
    missing = {k: v for k, v in state.items() if "layers.1.mlp.up_proj" not in k}
    with pytest.raises(ConversionError, match="model.layers.1.mlp.up_proj.weight"):
        from_transformers(missing, cfg)
    # The same tensors read as a multi-head model: k and v are too narrow.
    with pytest.raises(ConversionError, match="attn.qkv.weight: shape"):
        from_transformers(state, ModelConfig(**BASE))
    untied = {**state, "lm_head.weight": torch.randn(cfg.vocab_size, cfg.d_model)}
    with pytest.raises(ConversionError, match="ties them"):
        from_transformers(untied, cfg)
