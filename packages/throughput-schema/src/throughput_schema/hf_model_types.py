"""The transformers config classes of the small Llama family, as far as a config.json is
read here: each class's default for every key read. What a class's attention has that no key
says (Qwen2's q/k/v biases, Qwen3's q/k RMSNorm, OLMo 2's norms, Gemma 3's norms and scaled
embeddings) its knob declares
(`throughput_schema.configs.ModelConfig`). Taken from transformers' own classes (v4's `__init__` arguments and v5's fields agree
on these), so that a key a file leaves out means here what it means to transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEADS = "hidden_size // num_attention_heads"


@dataclass(frozen=True)
class ModelType:
    """One transformers config class: its defaults for the keys read here."""

    config_class: str
    defaults: dict[str, Any]
    # Mistral applies `sliding_window` whenever it is set; Qwen only with use_sliding_window.
    sliding_window_always: bool = False
    # Per-layer lists the class reads and a knob takes (any other per-layer list is refused).
    per_layer: tuple[str, ...] = ()
    # The key naming the MLP's activation (Gemma's classes read hidden_activation).
    activation_key: str = "hidden_act"
    # Its layer_types may name sliding_attention layers, each attending within sliding_window.
    windows: bool = False


# A string default is computed from other keys; None for num_key_value_heads means as many
# as num_attention_heads. rope_theta is v4's argument and v5's default_theta.
_COMMON = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 10_000.0}
MODEL_TYPES: dict[str, ModelType] = {
    "llama": ModelType(
        "LlamaConfig",
        {
            **_COMMON,
            "vocab_size": 32_000,
            "num_key_value_heads": None,
            "head_dim": HEADS,
            "max_position_embeddings": 2048,
        },
    ),
    "mistral": ModelType(
        "MistralConfig",
        {
            **_COMMON,
            "vocab_size": 32_000,
            "num_key_value_heads": 8,
            "head_dim": HEADS,
            "max_position_embeddings": 4096 * 32,
            "sliding_window": 4096,
        },
        sliding_window_always=True,
    ),
    "qwen2": ModelType(
        "Qwen2Config",
        {
            **_COMMON,
            "vocab_size": 151_936,
            "num_key_value_heads": 32,
            "head_dim": HEADS,
            "max_position_embeddings": 32_768,
            "use_sliding_window": False,
        },
    ),
    "qwen3": ModelType(
        "Qwen3Config",
        {
            **_COMMON,
            "vocab_size": 151_936,
            "num_key_value_heads": 32,
            "head_dim": 128,
            "max_position_embeddings": 32_768,
            "use_sliding_window": False,
        },
    ),
    # v5's default_theta is rope_theta's default; no_rope_layers, where missing, is derived
    # from no_rope_layer_interval: the last of every `interval` layers has no RoPE.
    "smollm3": ModelType(
        "SmolLM3Config",
        {
            **_COMMON,
            "rope_theta": 2_000_000.0,
            "tie_word_embeddings": True,
            "vocab_size": 128_256,
            "num_key_value_heads": 4,
            "head_dim": HEADS,
            "max_position_embeddings": 32_768,
            "use_sliding_window": False,
            "no_rope_layer_interval": 4,
        },
        per_layer=("no_rope_layers",),
    ),
    # OLMo 2's post-sublayer norms and whole q/k norm are in its class, not its keys (their knobs).
    "olmo2": ModelType(
        "Olmo2Config",
        {
            **_COMMON,
            "rms_norm_eps": 1e-5,
            "vocab_size": 50_304,
            "num_key_value_heads": None,
            "head_dim": HEADS,
            "max_position_embeddings": 2048,
        },
    ),
    # Gemma 3's text model: layer_types, or the older sliding_window_pattern (the last of every
    # `pattern` layers global), and the windowed layers' RoPE base rope_local_base_freq. Its
    # (1 + weight) norms, four a layer, q/k norm and sqrt(width) embedding scale are its
    # class's, not its keys' (their knobs).
    "gemma3_text": ModelType(
        "Gemma3TextConfig",
        {
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "vocab_size": 262_208,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 131_072,
            "sliding_window": 4096,
            "sliding_window_pattern": 6,
            "query_pre_attn_scalar": 256,
        },
        activation_key="hidden_activation",
        windows=True,
    ),
}
