"""transformers checkpoints and our model: the state-dict converter, and the transformers
model of a recipe's shape.

`from_transformers` maps a `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`,
`SmolLM3ForCausalLM`, `Olmo2ForCausalLM` or `Gemma3ForCausalLM` state dict onto `tiny_llm.model.Transformer`'s names: q, k and v stacked into `qkv` ([q | k | v],
biases alike), gate and up into `gate_up` (gate first, as `SwiGLU` chunks it), the rest one to
one. Both use the rotate-half RoPE layout, so no weight is permuted. It is how real weights
are loaded (`load_transformers`), and what the equality tests hold the model to.

`transformers_model` builds the transformers model a recipe means (the class that has its
knobs: Qwen3 for a q/k norm, Qwen2 for q/k/v biases, SmolLM3 for layers without RoPE, OLMo 2 for
norms on the sublayers' outputs and over the whole of q and k, Gemma 3 for its four (1 + weight)
norms a layer, Llama otherwise); the tests and
`benchmarks/peers.py` (peer B) use it. transformers is imported only there: the worker never
needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from throughput_schema import ModelConfig
from throughput_schema.knob_rules import HF_ACTIVATIONS
from throughput_schema.shape import weight_shapes

if TYPE_CHECKING:
    from tiny_llm.model import Transformer

# Per layer: our name <- transformers' names under `model.layers.{i}.`, stacked in this order.
LAYER = {
    "attn_norm.weight": ("input_layernorm.weight",),
    "attn.qkv.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "attn.qkv.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "attn.proj.weight": ("self_attn.o_proj.weight",),
    "attn.q_norm.weight": ("self_attn.q_norm.weight",),
    "attn.k_norm.weight": ("self_attn.k_norm.weight",),
    "mlp_norm.weight": ("post_attention_layernorm.weight",),
    "mlp.gate_up.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "mlp.down.weight": ("mlp.down_proj.weight",),
}
# OLMo 2 norms each sublayer's output: its two norms of a layer, under their names there.
POST_NORM = {
    "attn_norm.weight": ("post_attention_layernorm.weight",),
    "mlp_norm.weight": ("post_feedforward_layernorm.weight",),
}
# Gemma 3 norms each sublayer's input and its output: its four norms of a layer.
SANDWICH_NORM = {
    "attn_post_norm.weight": ("post_attention_layernorm.weight",),
    "mlp_norm.weight": ("pre_feedforward_layernorm.weight",),
    "mlp_post_norm.weight": ("post_feedforward_layernorm.weight",),
}
# Buffers some checkpoints carry; recomputed from the recipe, never weights.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class ConversionError(ValueError):
    """A state dict that does not fit the recipe; the message is one line."""


def from_transformers(state_dict: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict (`Transformer`'s names) from a transformers causal-LM state dict of `cfg`'s
    shape. Every tensor of the source is used or refused: a missing one, an extra one (an
    output-projection bias, say) or a wrong shape is a `ConversionError` naming it."""
    source = {k: v for k, v in state_dict.items() if not k.endswith(IGNORED_SUFFIXES)}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in source:
            raise ConversionError(f"the state dict has no {name}, which this recipe's model needs")
        used.add(name)
        return source[name]

    # The schema's shape of a layer: `LAYER`'s tensors less those only a knob adds, where it does not.
    layer = {name.removeprefix("blocks.0.") for name in weight_shapes(cfg) if name.startswith("blocks.0.")}
    out = {"embed.weight": take("model.embed_tokens.weight")}
    names = LAYER | POST_NORM if cfg.post_norm else LAYER | SANDWICH_NORM if cfg.sandwich_norm else LAYER
    for i in range(cfg.n_layers):
        for ours, theirs in names.items():
            if ours not in layer:
                continue
            parts = [take(f"model.layers.{i}.{name}") for name in theirs]
            out[f"blocks.{i}.{ours}"] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    out["norm.weight"] = take("model.norm.weight")
    if cfg.tie_embeddings:
        # A tied checkpoint may carry the head under its own name too; it must be the embedding.
        if "lm_head.weight" in source:
            if not torch.equal(take("lm_head.weight"), out["embed.weight"]):
                raise ConversionError("lm_head.weight differs from the embedding, but the recipe ties them")
        out["lm_head.weight"] = out["embed.weight"]
    else:
        out["lm_head.weight"] = take("lm_head.weight")
    extra = sorted(set(source) - used)
    if extra:
        raise ConversionError(f"the state dict has tensors this recipe's model lacks: {', '.join(extra[:4])}")
    _check_shapes(out, cfg)
    return out


def _check_shapes(out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    from tiny_llm.model import build_model

    want = build_model(cfg, "meta").state_dict()
    for name, tensor in out.items():
        if tuple(tensor.shape) != tuple(want[name].shape):
            raise ConversionError(
                f"{name}: shape {tuple(tensor.shape)} from the state dict, {tuple(want[name].shape)} in this recipe"
            )


@torch.no_grad()
def load_transformers(model: Transformer, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Copy a transformers state dict into `model`'s parameters in place (their storage, and
    so an optimizer arena's views of it, stays where it is)."""
    converted = from_transformers(state_dict, model.cfg)
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, tensor in converted.items():
        params[name].copy_(tensor)


def transformers_config(cfg: ModelConfig) -> Any:
    """The transformers config of `cfg`'s shape (SDPA attention), of the class that has its knobs."""
    import transformers

    if cfg.qk_norm and cfg.qkv_bias:
        # Qwen3's attention_bias would add an output-projection bias as well.
        raise ValueError("no transformers model has q/k/v biases and a q/k norm without an output bias")
    if cfg.sandwich_norm or cfg.norm_offset or cfg.embed_scale:
        return _gemma3_config(cfg)
    if cfg.sliding_layers or cfg.mlp_activation != "silu" or cfg.attn_scale_dim is not None:
        raise ValueError(
            "no transformers model has sliding windows, GeGLU or an attention scale without Gemma 3's norms"
        )
    olmo2 = cfg.post_norm or cfg.qk_norm_whole
    if olmo2 and not (cfg.post_norm and cfg.qk_norm_whole and not cfg.qkv_bias and not cfg.nope_layers):
        raise ValueError("transformers' OLMo 2 has both post_norm and qk_norm_whole, no q/k/v biases, RoPE everywhere")
    if cfg.nope_layers and (cfg.qk_norm or cfg.qkv_bias):
        raise ValueError("no transformers model has layers without RoPE and a q/k norm or q/k/v biases")
    if cfg.rope_scaling is None:
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    else:
        s = cfg.rope_scaling
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, "factor": s.factor,
                "low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings}  # fmt: skip
    kind = "Qwen3" if cfg.qk_norm else "Qwen2" if cfg.qkv_bias else "SmolLM3" if cfg.nope_layers else "Llama"
    kind = "Olmo2" if olmo2 else kind
    # SmolLM3's and OLMo 2's class defaults name special tokens of their own vocabularies; a padding
    # token would also freeze that embedding row.
    tokens = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None) if kind in ("SmolLM3", "Olmo2") else {}
    config = getattr(transformers, f"{kind}Config")(
        **tokens, vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context_length, rms_norm_eps=cfg.norm_eps,
        rope_parameters=rope, tie_word_embeddings=cfg.tie_embeddings, hidden_act="silu",
    )  # fmt: skip
    if kind in ("Llama", "SmolLM3"):
        config.attention_bias = config.mlp_bias = False
    if kind == "SmolLM3":  # its flags: 1 rotates, 0 does not; every layer attends in full
        config.no_rope_layers = [int(i not in cfg.nope_layers) for i in range(cfg.n_layers)]
        config.use_sliding_window, config.layer_types = False, ["full_attention"] * cfg.n_layers
    elif kind in ("Qwen3", "Olmo2"):
        config.attention_bias = False
    config._attn_implementation = "sdpa"
    return config


def _gemma3_config(cfg: ModelConfig) -> Any:
    """Gemma3TextConfig of `cfg`'s shape: its norms, q/k norm and embedding scale are its class's."""
    import transformers

    if not (cfg.sandwich_norm and cfg.norm_offset and cfg.embed_scale and cfg.qk_norm):
        raise ValueError("transformers' Gemma 3 has sandwich_norm, norm_offset, embed_scale and qk_norm together")
    if cfg.qkv_bias or cfg.nope_layers or cfg.rope_scaling is not None or cfg.post_norm or cfg.qk_norm_whole:
        raise ValueError("transformers' Gemma 3 has no q/k/v biases, RoPE in every layer without scaling, pre-norms")
    local = cfg.rope_theta if cfg.rope_local_theta is None else cfg.rope_local_theta
    kinds = ["sliding_attention" if i in cfg.sliding_layers else "full_attention" for i in range(cfg.n_layers)]
    config = transformers.Gemma3TextConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context_length, rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings, attention_bias=False, layer_types=kinds,
        hidden_activation=HF_ACTIVATIONS[cfg.mlp_activation],
        query_pre_attn_scalar=cfg.head_dim if cfg.attn_scale_dim is None else cfg.attn_scale_dim,
        # A window no layer uses is none; transformers wants a number all the same.
        sliding_window=cfg.sliding_window or cfg.context_length,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": cfg.rope_theta},
                         "sliding_attention": {"rope_type": "default", "rope_theta": local}},
        # Gemma's class defaults name special tokens of its own vocabulary; a padding token would
        # also freeze that embedding row.
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return config


def transformers_model(cfg: ModelConfig) -> Any:
    """A freshly initialised transformers causal LM of `cfg`'s shape (on the current default device)."""
    import transformers

    config = transformers_config(cfg)
    kind = type(config).__name__.removesuffix("Config").removesuffix("Text")
    return getattr(transformers, f"{kind}ForCausalLM")(config)
