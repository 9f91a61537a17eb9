"""What a config.json says layer by layer, and its RoPE: which layers attend within a sliding
window (`layer_types`, or Gemma 3's older `sliding_window_pattern`), which rotate (SmolLM3's
`no_rope_layers`), any other per-layer list (refused), and RoPE's base and scaling, one for
every layer or, for Gemma 3, one for the global layers and one for the windowed ones (its
`rope_local_base_freq`, or transformers 5's `rope_parameters` per layer type)."""

from __future__ import annotations

from typing import Any

from throughput_schema.hf_model_types import ModelType
from throughput_schema.hf_reader import HfConfigError, Reader

# Lists a config.json may hold that say nothing about each layer's shape.
_NOT_PER_LAYER = frozenset({"architectures", "bos_token_id", "eos_token_id", "pad_token_id", "layer_types"})
ATTENTION_KINDS = ("full_attention", "sliding_attention")
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def refuse_per_layer(config: dict[str, Any], kind: ModelType, src: str) -> None:
    """Layers that differ: a window where the type has none, an attention of another kind, a
    list not of one entry per layer, or another shape."""
    layer_types = config.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list):
            raise HfConfigError(f"{src}: layer_types is {layer_types!r}; expected a list")
        for i, t in enumerate(layer_types):
            if t not in ATTENTION_KINDS:
                raise HfConfigError(
                    f"{src}: layer_types[{i}] is {t!r}: only full_attention and sliding_attention layers are built"
                )
            if t == "sliding_attention" and not kind.windows:
                raise HfConfigError(f"{src}: layer_types[{i}] is {t!r}: a sliding attention window is not built")
    layers = config.get("num_hidden_layers")
    if isinstance(layer_types, list) and isinstance(layers, int) and len(layer_types) != layers:
        raise HfConfigError(f"{src}: layer_types has {len(layer_types)} entries for {layers} layers; one per layer")
    for key, value in config.items():
        if key in kind.per_layer:
            continue
        if key not in _NOT_PER_LAYER and isinstance(value, list) and value and len(value) == layers:
            raise HfConfigError(f"{src}: {key} is a per-layer array; every layer must have the same shape")


def layer_types(config: dict[str, Any], reader: Reader, layers: int) -> list[str] | None:
    """Each layer's attention where the type has windowed layers (Gemma 3), None elsewhere: as
    given (`refuse_per_layer` checked it), or from sliding_window_pattern as Gemma3TextConfig
    derives it: the last layer of every `pattern` is global, the others windowed."""
    if not reader.kind.windows:
        return None
    if config.get("layer_types") is not None:
        return list(config["layer_types"])
    pattern = reader.whole("sliding_window_pattern")
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]


def no_rope_flags(config: dict[str, Any], reader: Reader, layers: int) -> list[int]:
    """SmolLM3's flag per layer, 1 where it rotates q and k and 0 where it does not, as
    `SmolLM3Config` reads them: given whole, or derived from no_rope_layer_interval."""
    flags = config.get("no_rope_layers")
    if flags is None:
        interval = reader.whole("no_rope_layer_interval")
        return [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(flags, list) or any(f not in (0, 1) or isinstance(f, float) for f in flags):
        raise HfConfigError(f"{reader.src}: no_rope_layers is {flags!r}; expected a list of 1 (RoPE) or 0 (none)")
    if len(flags) != layers:
        raise HfConfigError(f"{reader.src}: no_rope_layers has {len(flags)} entries for {layers} layers; one per layer")
    return flags


def _theta(params: dict[str, Any], key: str, src: str) -> float:
    theta = params["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise HfConfigError(f"{src}: {key}.rope_theta is {theta!r}; it must be a positive number")
    return float(theta)


def _whole_rotation(params: dict[str, Any], key: str, src: str) -> None:
    factor = params.get("partial_rotary_factor")
    if factor not in (None, 1, 1.0):
        raise HfConfigError(f"{src}: {key}.partial_rotary_factor is {factor!r}: RoPE turns every pair of a head here")


def rope(config: dict[str, Any], reader: Reader, src: str) -> tuple[float, dict[str, Any] | None, float | None]:
    """rope_theta, the scaling, and the windowed layers' base (None but for Gemma 3):
    transformers 4 writes `rope_theta` and `rope_scaling`, transformers 5 one `rope_parameters`
    holding both (its `rope_scaling`, where set, wins)."""
    if reader.kind.windows:
        return _windowed_rope(config, reader, src)
    key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    params = config.get(key) or {}
    if not isinstance(params, dict):
        raise HfConfigError(f"{src}: {key} is {params!r}; expected an object")
    if params and all(isinstance(v, dict) for v in params.values()):
        raise HfConfigError(f"{src}: {key} is given per layer type; every layer must have the same RoPE")
    theta = _theta(params, key, src) if "rope_theta" in params else reader.number("rope_theta")
    _whole_rotation(params, key, src)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None, None
    if rope_type != "llama3":
        raise HfConfigError(f"{src}: {key}.rope_type is {rope_type!r}; only Llama 3's scaling (llama3) is built")
    scaling: dict[str, Any] = {"type": "llama3"}
    for name in _LLAMA3_KEYS:
        value = params.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise HfConfigError(f"{src}: {key}.{name} is {value!r}; Llama 3 scaling needs a positive number")
        scaling[name] = value if name == "original_max_position_embeddings" else float(value)
    if not isinstance(scaling["original_max_position_embeddings"], int):
        raise HfConfigError(f"{src}: {key}.original_max_position_embeddings must be a whole number")
    return theta, scaling, None


def _windowed_rope(config: dict[str, Any], reader: Reader, src: str) -> tuple[float, None, float]:
    """Gemma 3's two RoPE bases, unscaled: rope_theta and rope_local_base_freq (v4), or v5's
    rope_parameters by layer type (a flat one is the global layers')."""
    if config.get("rope_scaling"):
        raise HfConfigError(
            f"{src}: rope_scaling is {config['rope_scaling']!r}: Gemma's RoPE scaling is not built; "
            "use a config without it (the 270M and 1B have none)"
        )
    params = config.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise HfConfigError(f"{src}: rope_parameters is {params!r}; expected an object")
    by_type = params if params and all(isinstance(v, dict) for v in params.values()) else {"full_attention": params}
    for name in set(by_type) - set(ATTENTION_KINDS):
        raise HfConfigError(f"{src}: rope_parameters.{name} names no layer type built here")
    thetas = []
    for layer_type, fallback in (("full_attention", "rope_theta"), ("sliding_attention", "rope_local_base_freq")):
        p, key = by_type.get(layer_type) or {}, f"rope_parameters.{layer_type}"
        rope_type = p.get("rope_type", p.get("type", "default"))
        if rope_type != "default":
            raise HfConfigError(f"{src}: {key}.rope_type is {rope_type!r}: Gemma's RoPE scaling is not built")
        _whole_rotation(p, key, src)
        thetas.append(_theta(p, key, src) if "rope_theta" in p else reader.number(fallback))
    return thetas[0], None, thetas[1]
