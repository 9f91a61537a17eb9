"""A Hugging Face model's `config.json` read as a recipe: the small Llama family, SmolLM3,
OLMo 2 and Gemma 3 only.

A key the file leaves out takes the default of that model type's transformers config
class (`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`, `SmolLM3Config`,
`Olmo2Config`, `Gemma3TextConfig`), as transformers
itself would, and the import says which defaults it used. Anything the decoder cannot
build exactly (another architecture, experts, per-layer shapes, biases beyond Qwen2's
q/k/v, an activation other than SiLU or tanh GELU, a sliding window outside Gemma 3's
layers, RoPE scaling other than Llama 3's, soft-capping, bidirectional attention)
is refused in one line naming the key, since measuring a different model under the
file's name would be worse than measuring none. What differs by layer is read in
`throughput_schema.hf_layers`.

A config.json has no training section and no measurement context: the recipe takes the
protocol's training and optimizer settings, and the context a campaign's `--contexts`
(or `--set model.context_length=`) chooses; `max_position_embeddings` is only recorded.
No torch, no transformers: the controller converts files on machines without either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from throughput_schema import knobs
from throughput_schema.codec import SchemaError, not_text, read_bytes
from throughput_schema.configs import Protocol, protocol_settings
from throughput_schema.curve_names import MODEL_NAME_RULE, is_model_name, reduced_model_name
from throughput_schema.digests import sha256_bytes
from throughput_schema.hf_layers import layer_types, no_rope_flags, refuse_per_layer, rope
from throughput_schema.hf_model_types import MODEL_TYPES, ModelType
from throughput_schema.hf_reader import HfConfigError, Reader
from throughput_schema.knob_rules import HF_ACTIVATIONS

# The context and batch a converted recipe carries until a campaign or `--set` chooses its
# own, as the Llama-family presets in configs/ carry them.
DEFAULT_CONTEXT = 2048
DEFAULT_MICRO_BATCH = 4
# The sizes that make the model: a class default for one of these describes some other
# (7B-sized) model, not a detail the file left out, so a file without them is refused.
REQUIRED = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
# Keys that declare experts (Mixtral, Qwen-MoE, DeepSeek); any of them set is not a dense decoder.
_EXPERT_KEYS = (
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "n_routed_experts",
    "n_shared_experts",
    "num_shared_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_layer_freq",
    "first_k_dense_replace",
)
# Keys whose value, other than null, the decoder does not build: tanh soft-capping of the
# logits or the attention scores (Gemma 2; Gemma 3's are null).
_SOFT_CAPS = ("final_logit_softcapping", "attn_logit_softcapping")


@dataclass(frozen=True)
class Imported:
    """A converted config.json: the recipe as a preset's mapping, and what the import decided."""

    raw: dict[str, Any]
    model_type: str
    config_class: str
    # "key=value" for each key taken from the config class's defaults, in reading order.
    defaults: tuple[str, ...]
    max_position_embeddings: int
    sha256: str
    # Set where the folder's name had to be changed to be a model name.
    renamed_from: str | None = None

    @property
    def name(self) -> str:
        return self.raw["name"]


# ---------------------------------------------------------------------------- names


def default_name(path: Path) -> str:
    """The folder holding config.json; in a Hugging Face cache
    (`models--ORG--NAME/snapshots/REVISION/config.json`) the repository's NAME."""
    folder = path.resolve().parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    return folder.name


def _model_name(path: Path, name: str | None) -> tuple[str, str | None]:
    if name is not None:
        if not is_model_name(name):
            raise HfConfigError(f"--name {name!r}: a model name holds {MODEL_NAME_RULE}")
        return name, None
    folder = default_name(path)
    reduced = reduced_model_name(folder)
    if not reduced:
        raise HfConfigError(f"{path}: its folder {folder!r} gives no model name; choose one with --name")
    return reduced, (folder if reduced != folder else None)


# ----------------------------------------------------------------------------- reading


def read_config(path: str | Path) -> tuple[dict[str, Any], str]:
    """The parsed config.json and the sha256 of its bytes; a one-line error otherwise."""
    path = Path(path)
    try:
        data = read_bytes(path)
    except SchemaError as exc:
        raise HfConfigError(str(exc)) from None
    why = not_text(data)
    if why:
        raise HfConfigError(f"{path}: not JSON: {why}")
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise HfConfigError(f"{path}: not JSON{where}; give a model's config.json") from None
    if not isinstance(parsed, dict):
        raise HfConfigError(f"{path}: not a model's config.json (expected a JSON object with model_type)")
    return parsed, sha256_bytes(data)


def looks_like_hf_config(raw: Any) -> bool:
    """A Hugging Face config (its keys), not a recipe written as JSON (a `model` section)."""
    return isinstance(raw, dict) and "model" not in raw and any(k in raw for k in (*REQUIRED, "architectures"))


def import_if_config(path: str | Path) -> Imported | None:
    """`path` converted where it is a Hugging Face config, None where it is a recipe written
    as JSON (which a YAML reader reads as before)."""
    config, sha256 = read_config(path)
    if not looks_like_hf_config(config):
        return None
    return convert(config, path=Path(path), sha256=sha256)


def import_config(path: str | Path, *, name: str | None = None) -> Imported:
    """Read `path` and convert it; every refusal is an HfConfigError naming the key."""
    path = Path(path)
    config, sha256 = read_config(path)
    return convert(config, path=path, sha256=sha256, name=name)


def convert(config: dict[str, Any], *, path: Path, sha256: str = "", name: str | None = None) -> Imported:
    src = str(path)
    for key in REQUIRED:
        if key not in config:
            raise HfConfigError(f"{src}: {key} is missing; a model's config.json names it")
    model_type = config["model_type"]
    kind = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    if kind is None:
        raise HfConfigError(
            f"{src}: model_type {model_type!r} is not built here; the Llama family is: {', '.join(MODEL_TYPES)}"
        )
    _refuse_unbuildable(config, kind, src)
    reader = Reader(config, kind, src)
    act = reader.text(kind.activation_key)
    if act not in HF_ACTIVATIONS.values():
        raise HfConfigError(
            f"{src}: {kind.activation_key} is {act!r}; the decoder's gated MLP gates with silu or gelu_pytorch_tanh only"
        )
    layers = reader.whole("num_hidden_layers")
    hidden = reader.whole("hidden_size")
    heads = reader.whole("num_attention_heads")
    ffn = reader.whole("intermediate_size")
    vocab = reader.whole("vocab_size")
    kv_heads = reader.whole("num_key_value_heads", none_means=heads)
    head_dim = reader.head_dim(hidden, heads)
    tie = reader.flag("tie_word_embeddings")
    eps = reader.number("rms_norm_eps")
    max_positions = reader.whole("max_position_embeddings")
    rope_theta, rope_scaling, local_theta = rope(config, reader, src)
    no_rope = no_rope_flags(config, reader, layers) if "no_rope_layers" in kind.per_layer else None
    kinds = layer_types(config, reader, layers)
    window = reader.whole("sliding_window") if kinds and "sliding_attention" in kinds else None
    scalar = reader.whole("query_pre_attn_scalar") if "query_pre_attn_scalar" in kind.defaults else None
    model_name, renamed_from = _model_name(path, name)

    protocol = Protocol()  # the guide's protocol: every campaign measures with it
    model: dict[str, Any] = {
        "n_layers": layers,
        "d_model": hidden,
        "n_heads": heads,
        "ffn_dim": ffn,
        "context_length": DEFAULT_CONTEXT,
        "vocab_size": vocab,
        "head_dim": head_dim,
        "rope_theta": rope_theta,
        "norm_eps": eps,
    }
    model |= knobs.from_hf(
        {
            "model_type": model_type,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "tie_word_embeddings": tie,
            "rope_scaling": rope_scaling,
            "no_rope_layers": no_rope,
            "layer_types": kinds,
            "sliding_window": window,
            "rope_local_base_freq": local_theta,
            "hidden_activation": act,
            "query_pre_attn_scalar": scalar,
            "head_dim": head_dim,
        }
    )
    raw = {
        "name": model_name,
        "model": model,
        "training": {"micro_batch_size": DEFAULT_MICRO_BATCH, "batch_tokens": DEFAULT_MICRO_BATCH * DEFAULT_CONTEXT}
        | protocol_settings(protocol, "training"),
        "optimizer": protocol_settings(protocol, "optimizer"),
    }
    return Imported(
        raw=raw,
        model_type=model_type,
        config_class=kind.config_class,
        defaults=tuple(reader.defaults),
        max_position_embeddings=max_positions,
        sha256=sha256,
        renamed_from=renamed_from,
    )


def _refuse_unbuildable(config: dict[str, Any], kind: ModelType, src: str) -> None:
    for key in _EXPERT_KEYS:
        if config.get(key):
            raise HfConfigError(f"{src}: {key} is {config[key]!r}: a mixture of experts is not a dense decoder")
    if config.get("attention_bias") is True:
        raise HfConfigError(
            f"{src}: attention_bias is true: it adds biases to every attention projection, the output one too, "
            "which the decoder does not build"
        )
    if config.get("mlp_bias") is True:
        raise HfConfigError(f"{src}: mlp_bias is true: the decoder's gated MLP has no biases")
    for key in _SOFT_CAPS:
        if config.get(key) is not None:
            raise HfConfigError(f"{src}: {key} is {config[key]!r}: soft-capping is not built; only null is")
    if config.get("use_bidirectional_attention") is True:
        raise HfConfigError(
            f"{src}: use_bidirectional_attention is true: the decoder attends causally, as a causal LM trains"
        )
    if config.get("use_sliding_window") is True:
        raise HfConfigError(f"{src}: use_sliding_window is true: a sliding attention window is not built")
    if kind.sliding_window_always:
        window = config.get("sliding_window", kind.defaults["sliding_window"])
        if window is not None:
            given = "" if "sliding_window" in config else f" ({kind.config_class}'s default)"
            raise HfConfigError(
                f"{src}: sliding_window is {window}{given}: a sliding attention window is not built; "
                "a Mistral config without one says sliding_window: null"
            )
    refuse_per_layer(config, kind, src)
    factor = config.get("partial_rotary_factor")
    if factor not in (None, 1, 1.0):
        raise HfConfigError(f"{src}: partial_rotary_factor is {factor!r}: RoPE turns every pair of a head here")


# ------------------------------------------------------------------------------ writing


def recipe_yaml(imported: Imported, *, source: str, parameters: int) -> str:
    """The recipe as a preset file: its parameter count on the first comment line, as in
    configs/, then where it came from and which of the class's defaults it took."""
    import yaml

    defaults = ", ".join(imported.defaults) if imported.defaults else "none"
    lines = [
        f"# {parameters:,} parameters: {imported.name}, converted from {source} "
        f"(model_type {imported.model_type}, sha256 {imported.sha256[:16]}).",
        f"# Keys missing from it took transformers' {imported.config_class} defaults: {defaults}.",
        f"# max_position_embeddings {imported.max_position_embeddings} is recorded, not used: the context is a "
        "campaign's --contexts (or --set model.context_length=).",
        "# training and optimizer: the measurement protocol's settings, as in every preset.",
    ]
    body = yaml.safe_dump(imported.raw, sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n" + body
