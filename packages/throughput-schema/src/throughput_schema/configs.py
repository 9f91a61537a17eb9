"""What a point is made of: the recipe, the cluster profile, the measurement protocol
and the point itself, plus the base classes and value constraints every record shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from throughput_schema.curve_names import curve_name
from throughput_schema.scheduler_names import SchedulerName, check_name
from throughput_schema.version import SCHEMA_VERSION

PositiveInt = Annotated[int, Meta(gt=0)]
NonNegInt = Annotated[int, Meta(ge=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
Fraction = Annotated[float, Meta(ge=0, le=1)]


class _Config(msgspec.Struct, frozen=True, kw_only=True):
    pass


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = SCHEMA_VERSION


# --------------------------------------------------------------------------- recipe


class Llama3RopeScaling(_Config, frozen=True, tag_field="type", tag="llama3"):
    """Llama 3's RoPE frequency scaling, applied to the inverse frequencies as transformers does."""

    factor: PositiveFloat
    low_freq_factor: PositiveFloat
    high_freq_factor: PositiveFloat
    original_max_position_embeddings: PositiveInt


# A tagged union of one today: a new scaling type is a new Struct with its own tag.
RopeScaling = Llama3RopeScaling


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
    # Why a recipe's value cannot be built (one line, without the source), or None.
    check: Callable[[ModelConfig, Any], str | None] = _builds_any


def _kv_heads_divide(model: ModelConfig, value: Any) -> str | None:
    if model.n_heads % model.kv_heads == 0:
        return None
    return (
        f"model.n_kv_heads ({model.kv_heads}) must divide model.n_heads ({model.n_heads}): "
        "each key/value head serves a whole group of query heads"
    )


def _one_qk_norm(model: ModelConfig, value: Any) -> str | None:
    if value and model.qk_norm:
        return "model.qk_norm and model.qk_norm_whole are both set: q and k are normed per head or whole, not both"
    return None


def _nope_layers_in_range(model: ModelConfig, value: tuple[int, ...]) -> str | None:
    if all(0 <= i < model.n_layers for i in value) and list(value) == sorted(set(value)):
        return None
    return (
        f"model.nope_layers ({list(value)}) must list layers of this model (0 to {model.n_layers - 1}), "
        "each once, in order"
    )


def _nope_from_hf(hf: Mapping[str, Any]) -> list[int] | None:
    # transformers' SmolLM3 flags each layer: 1 rotates, 0 does not. A list, not a tuple:
    # the converted recipe is written as YAML. None (no layer without RoPE) keeps the default.
    flags = hf.get("no_rope_layers") or []
    return [i for i, rotates in enumerate(flags) if not rotates] or None


# The model-spec table: a field annotated with a `Knob` is a knob, and that field is its one
# declaration. (A comment, not the docstring: the docstring is the JSON Schema's description.)
class ModelConfig(_Config, frozen=True):
    """A Llama-style decoder: RMSNorm, SwiGLU, RoPE, and the knobs the small Llama family turns.

    The defaults are the project's original decoder (as many key/value heads as query heads,
    tied embeddings, no biases, no q/k norm, plain RoPE), so recipes written before the knobs
    existed read exactly as they did.
    """

    n_layers: PositiveInt
    d_model: PositiveInt
    n_heads: PositiveInt
    ffn_dim: PositiveInt
    context_length: PositiveInt
    vocab_size: PositiveInt = 32_000
    head_dim: PositiveInt = 64
    rope_theta: PositiveFloat = 10_000.0
    norm_eps: PositiveFloat = 1e-5
    n_kv_heads: Annotated[
        PositiveInt | None,
        Knob(
            "Key/value heads, each serving n_heads / n_kv_heads query heads: None is as many as "
            "n_heads (multi-head attention), 1 is multi-query attention; narrows the k and v "
            "projections (counted through `kv_heads`).",
            # As many as the heads is the default: one spelling of one model.
            from_hf=lambda hf: (
                None if hf["num_key_value_heads"] == hf["num_attention_heads"] else hf["num_key_value_heads"]
            ),
            check=_kv_heads_divide,
        ),
    ] = None
    tie_embeddings: Annotated[
        bool,
        Knob(
            "The LM head reuses the embedding matrix; untied, it is a matrix of its own and the "
            "input embedding is a lookup, outside the matmul FLOPs.",
            model_tensors=lambda m, tied: {} if tied else {"lm_head.weight": (m.vocab_size, m.d_model)},
            from_hf=lambda hf: hf["tie_word_embeddings"],
        ),
    ] = True
    qkv_bias: Annotated[
        bool,
        Knob(
            "Biases on the q, k and v projections (Qwen2); never on the output projection.",
            layer_tensors=lambda m, on: {"attn.qkv.bias": ((m.n_heads + 2 * m.kv_heads) * m.head_dim,)} if on else {},
            from_hf=lambda hf: hf["model_type"] == "qwen2",
        ),
    ] = False
    qk_norm: Annotated[
        bool,
        Knob(
            "RMSNorm with a learned head_dim weight on each head of q and of k, before RoPE (Qwen3).",
            layer_tensors=lambda m, on: (
                {"attn.q_norm.weight": (m.head_dim,), "attn.k_norm.weight": (m.head_dim,)} if on else {}
            ),
            from_hf=lambda hf: hf["model_type"] == "qwen3",
        ),
    ] = False
    rope_scaling: Annotated[
        RopeScaling | None,
        Knob("Llama 3's scaling of RoPE's frequencies; no weights, no FLOPs.", from_hf=lambda hf: hf["rope_scaling"]),
    ] = None
    nope_layers: Annotated[
        tuple[int, ...],
        Knob(
            "The layers (from 0) whose attention has no RoPE: q and k are not rotated there (SmolLM3's "
            "NoPE layers, every fourth); no weights, no FLOPs.",
            from_hf=_nope_from_hf,
            check=_nope_layers_in_range,
        ),
    ] = ()
    qk_norm_whole: Annotated[
        bool,
        Knob(
            "RMSNorm with a learned weight over the whole projected q (n_heads * head_dim) and the whole "
            "projected k (kv_heads * head_dim), not per head, before RoPE (OLMo 2); not with qk_norm.",
            layer_tensors=lambda m, on: (
                {"attn.q_norm.weight": (m.n_heads * m.head_dim,), "attn.k_norm.weight": (m.kv_heads * m.head_dim,)}
                if on
                else {}
            ),
            # None, not False, elsewhere: an import of any other type writes no new key.
            from_hf=lambda hf: hf["model_type"] == "olmo2" or None,
            check=_one_qk_norm,
        ),
    ] = False
    post_norm: Annotated[
        bool,
        Knob(
            "Each sublayer's output is RMS-normed, then added to the residual stream, instead of its "
            "input being normed (OLMo 2); the same two norms a layer, so no weights or FLOPs change.",
            from_hf=lambda hf: hf["model_type"] == "olmo2" or None,
        ),
    ] = False

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


class TrainingConfig(_Config, frozen=True):
    """One update = one micro-batch: there is no gradient accumulation."""

    micro_batch_size: PositiveInt
    batch_tokens: PositiveInt
    seed: int = 42
    grad_clip: PositiveFloat = 1.0
    autocast_dtype: Literal["bfloat16"] = "bfloat16"


class OptimizerConfig(_Config, frozen=True):
    name: Literal["adamw"] = "adamw"
    lr: NonNegFloat = 1e-3
    beta1: Fraction = 0.9
    beta2: Fraction = 0.99
    eps: PositiveFloat = 1e-8
    weight_decay: NonNegFloat = 0.1


class Recipe(_Record, frozen=True):
    """A resolved model recipe: the YAML preset with every `--set` applied."""

    name: str
    model: ModelConfig
    training: TrainingConfig
    optimizer: OptimizerConfig = OptimizerConfig()


# ------------------------------------------------------------------- cluster, protocol


class ClusterProfile(_Config, frozen=True):
    """Where and how jobs run. `scheduler: local` runs them as child processes."""

    name: str
    scheduler: SchedulerName
    account: str = ""
    partition: str = ""
    gpus_per_job: PositiveInt = 1
    cpus_per_task: PositiveInt = 8
    mem: str = "64G"
    time_limit_minutes: PositiveInt = 14
    watchdog_minutes: PositiveFloat = 13.0
    python: str = ".venv-aarch64/bin/python"
    max_concurrent_jobs: PositiveInt = 12
    # Added to the submit command as given; the backend refuses what a campaign cannot follow.
    extra_submit_args: list[str] = []
    # A job that ended before its result.json is seen: how long the watcher waits for the file
    # before deriving one (a shared filesystem shows a compute node's files late; NFS's
    # attribute cache alone holds them up to 60 s). Only for schedulers that run jobs elsewhere.
    result_grace_seconds: NonNegFloat = 120.0

    def __post_init__(self) -> None:
        check_name(self.scheduler)


# Read only for their defaults: the protocol's recipe settings start where a recipe's do.
_TRAINING = TrainingConfig(micro_batch_size=1, batch_tokens=1)
_OPTIMIZER = OptimizerConfig()


class Protocol(_Config, frozen=True):
    """The campaign's measurement protocol, applied to every model alike.

    A field named as a training or optimizer field of the recipe sets that field at every
    point (`PROTOCOL_RECIPE_FIELDS`); its default is the recipe's.
    """

    warmup: NonNegInt = 20
    calibration_updates: PositiveInt = 5
    windows: PositiveInt = 5
    extra_windows: NonNegInt = 5
    window_seconds: PositiveFloat = 10.0
    min_updates_per_window: PositiveInt = 20
    cv_threshold: PositiveFloat = 0.05
    lr: NonNegFloat = _OPTIMIZER.lr
    beta1: Fraction = _OPTIMIZER.beta1
    beta2: Fraction = _OPTIMIZER.beta2
    eps: PositiveFloat = _OPTIMIZER.eps
    weight_decay: NonNegFloat = _OPTIMIZER.weight_decay
    grad_clip: PositiveFloat = _TRAINING.grad_clip
    seed: int = _TRAINING.seed
    # Optimizer timing only: each synchronised burst of graph replays targets this.
    burst_seconds: PositiveFloat = 0.1


# The recipe fields the protocol sets, by recipe section, in the section's field order.
PROTOCOL_RECIPE_FIELDS: dict[str, tuple[str, ...]] = {
    section: tuple(name for name in config.__struct_fields__ if name in Protocol.__struct_fields__)
    for section, config in (("training", TrainingConfig), ("optimizer", OptimizerConfig))
}


def protocol_settings(protocol: Protocol | None, section: str) -> dict[str, object]:
    """The values `protocol` sets in one recipe section (none without a protocol)."""
    if protocol is None:
        return {}
    return {name: getattr(protocol, name) for name in PROTOCOL_RECIPE_FIELDS[section]}


# ----------------------------------------------------------------------------- points


class PointSpec(_Record, frozen=True):
    """One point of a curve: a model at a context and a batch, one attempt."""

    model: str
    context_length: PositiveInt
    batch_size: PositiveInt
    attempt: PositiveInt = 1
    mode: Literal["throughput", "optimizer-timing"] = "throughput"

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context_length)
