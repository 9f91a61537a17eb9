"""What a knob of `ModelConfig` declares (`Knob`, carried on its field in
`throughput_schema.configs`), and the knobs' rules that need more than a line there: which
values a knob refuses (`Knob.check`), how it reads its value from a config.json as the HF
import read it (`Knob.from_hf`) and the keys its layers attend to (`Knob.attended_keys`).
Part of the knob table, kept beside it so that the table itself stays a list of declarations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A `configs.ModelConfig`, by name only: configs.py declares its knobs with this module's
# `Knob`, so importing it here, even for type checking, would be an import cycle.
ModelConfig = Any

Shapes = dict[str, tuple[int, ...]]


def _adds_nothing(model: ModelConfig, value: Any) -> Shapes:
    return {}


def _builds_any(model: ModelConfig, value: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Knob:
    """What a knob of `ModelConfig` does, carried on its field (`Annotated[type, Knob(...)]`)
    beside the name, type and default the field gives; `throughput_schema.knobs` reads them.
    Each function gets the model and the knob's value in it.

    The tensors a knob adds are counted by the schema's shape (`throughput_schema.shape`) and
    so weigh 6 FLOPs per element per token there like every other weight.
    """

    help: str
    # Trainable tensors it adds to each layer (named as under `blocks.{i}.` in `tiny_llm.model`).
    layer_tensors: Callable[[ModelConfig, Any], Shapes] = _adds_nothing
    # Trainable tensors it adds outside the layers.
    model_tensors: Callable[[ModelConfig, Any], Shapes] = _adds_nothing
    # Its recipe value from a config.json's values as the HF import read them, by key
    # (`model_type` among them); None leaves it out of the recipe, at its default.
    from_hf: Callable[[Mapping[str, Any]], Any] = lambda hf: None
    # The keys a query attends to in the layers where it sees fewer than the context, by layer
    # (the attention FLOPs count them in place of the context there).
    attended_keys: Callable[[ModelConfig, Any], dict[int, int]] = lambda m, value: {}
    # Why a recipe's value cannot be built (one line, without the source), or None.
    check: Callable[[ModelConfig, Any], str | None] = _builds_any


# transformers' name of each MLP activation the decoder builds, by the knob's name for it.
HF_ACTIVATIONS = {"silu": "silu", "gelu_tanh": "gelu_pytorch_tanh"}


def kv_heads_divide(model: ModelConfig, value: Any) -> str | None:
    if model.n_heads % model.kv_heads == 0:
        return None
    return (
        f"model.n_kv_heads ({model.kv_heads}) must divide model.n_heads ({model.n_heads}): "
        "each key/value head serves a whole group of query heads"
    )


def one_qk_norm(model: ModelConfig, value: Any) -> str | None:
    if value and model.qk_norm:
        return "model.qk_norm and model.qk_norm_whole are both set: q and k are normed per head or whole, not both"
    return None


def layers_in_range(knob: str) -> Callable[[ModelConfig, tuple[int, ...]], str | None]:
    """The check of a knob that lists layers: each a layer of the model, once, in order."""

    def check(model: ModelConfig, value: tuple[int, ...]) -> str | None:
        if all(0 <= i < model.n_layers for i in value) and list(value) == sorted(set(value)):
            return None
        return (
            f"model.{knob} ({list(value)}) must list layers of this model (0 to {model.n_layers - 1}), "
            "each once, in order"
        )

    return check


def windowed_layers_have_a_window(model: ModelConfig, value: tuple[int, ...]) -> str | None:
    if value and model.sliding_window is None:
        return "model.sliding_layers lists layers but model.sliding_window is not set: give the window in tokens"
    return layers_in_range("sliding_layers")(model, value)


def window_keys(model: ModelConfig, value: tuple[int, ...]) -> dict[int, int]:
    window = model.sliding_window
    return {i: min(model.context_length, window) for i in value} if window is not None else {}


def nope_from_hf(hf: Mapping[str, Any]) -> list[int] | None:
    # transformers' SmolLM3 flags each layer: 1 rotates, 0 does not. A list, not a tuple:
    # the converted recipe is written as YAML. None (no layer without RoPE) keeps the default.
    flags = hf.get("no_rope_layers") or []
    return [i for i, rotates in enumerate(flags) if not rotates] or None


def sliding_from_hf(hf: Mapping[str, Any]) -> list[int] | None:
    # transformers names each layer's attention; None (every layer global) keeps the default.
    types = hf.get("layer_types") or []
    return [i for i, kind in enumerate(types) if kind == "sliding_attention"] or None


def window_from_hf(hf: Mapping[str, Any]) -> int | None:
    # A window no layer uses is not part of the model.
    return hf.get("sliding_window") if sliding_from_hf(hf) else None


def local_theta_from_hf(hf: Mapping[str, Any]) -> float | None:
    local = hf.get("rope_local_base_freq")
    return float(local) if sliding_from_hf(hf) and local is not None else None


def activation_from_hf(hf: Mapping[str, Any]) -> str | None:
    ours = {theirs: name for name, theirs in HF_ACTIVATIONS.items()}[hf.get("hidden_activation", "silu")]
    return None if ours == "silu" else ours


def scale_dim_from_hf(hf: Mapping[str, Any]) -> int | None:
    # Gemma scales scores by query_pre_attn_scalar ** -0.5; equal to head_dim it is the default.
    scalar = hf.get("query_pre_attn_scalar")
    return None if scalar is None or scalar == hf["head_dim"] else scalar


def gemma_from_hf(hf: Mapping[str, Any]) -> bool | None:
    # None, not False, elsewhere: an import of any other type writes no new key.
    return hf["model_type"] == "gemma3_text" or None
