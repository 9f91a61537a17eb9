"""What a point is made of: the recipe, the cluster profile, the measurement protocol
and the point itself, plus the base classes and value constraints every record shares."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from throughput_schema import knob_rules as rules
from throughput_schema.curve_names import curve_name
from throughput_schema.knob_rules import Knob
from throughput_schema.precision import Precision
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


# The model-spec table: a field annotated with a `Knob` is a knob, and that field is its one
# declaration. (A comment, not the docstring: the docstring is the JSON Schema's description.)
class ModelConfig(_Config, frozen=True):
    """A Llama-style decoder: RMSNorm, SwiGLU, RoPE, and the knobs the small Llama family,
    SmolLM3, OLMo 2 and Gemma 3 turn.

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
            check=rules.kv_heads_divide,
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
            "RMSNorm with a learned head_dim weight on each head of q and of k, before RoPE (Qwen3, Gemma 3).",
            layer_tensors=lambda m, on: (
                {"attn.q_norm.weight": (m.head_dim,), "attn.k_norm.weight": (m.head_dim,)} if on else {}
            ),
            from_hf=lambda hf: hf["model_type"] in ("qwen3", "gemma3_text"),
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
            from_hf=rules.nope_from_hf,
            check=rules.layers_in_range("nope_layers"),
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
            check=rules.one_qk_norm,
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
    sliding_window: Annotated[
        PositiveInt | None,
        Knob(
            "Tokens a query of a windowed layer (sliding_layers) attends to: itself and the window - 1 "
            "before it (Gemma 3); no weights; its attention FLOPs count min(context, window) keys.",
            from_hf=rules.window_from_hf,
        ),
    ] = None
    sliding_layers: Annotated[
        tuple[int, ...],
        Knob(
            "The layers (from 0) that attend within sliding_window; every other layer attends to the "
            "whole context (Gemma 3: five of every six). [] makes every layer global.",
            attended_keys=rules.window_keys,
            from_hf=rules.sliding_from_hf,
            check=rules.windowed_layers_have_a_window,
        ),
    ] = ()
    rope_local_theta: Annotated[
        PositiveFloat | None,
        Knob(
            "RoPE's base in the windowed layers (Gemma 3's rope_local_base_freq); None: rope_theta.",
            from_hf=rules.local_theta_from_hf,
        ),
    ] = None
    norm_offset: Annotated[
        bool,
        Knob(
            "Every RMSNorm scales by (1 + weight), its weight starting at 0 (Gemma); the same tensors.",
            from_hf=rules.gemma_from_hf,
        ),
    ] = False
    sandwich_norm: Annotated[
        bool,
        Knob(
            "Four norms a layer: each sublayer's input and its output are normed, then added (Gemma 3).",
            layer_tensors=lambda m, on: (
                {"attn_post_norm.weight": (m.d_model,), "mlp_post_norm.weight": (m.d_model,)} if on else {}
            ),
            from_hf=rules.gemma_from_hf,
        ),
    ] = False
    mlp_activation: Annotated[
        Literal["silu", "gelu_tanh"],
        Knob(
            "The gate's activation in the gated MLP: silu (SwiGLU) or tanh-approximated GELU (GeGLU, Gemma).",
            from_hf=rules.activation_from_hf,
        ),
    ] = "silu"
    embed_scale: Annotated[
        bool,
        Knob(
            "The input embeddings are multiplied by sqrt(d_model) (Gemma); the LM head is not.",
            from_hf=rules.gemma_from_hf,
        ),
    ] = False
    attn_scale_dim: Annotated[
        PositiveInt | None,
        Knob(
            "Attention scores are scaled by attn_scale_dim ** -0.5 instead of head_dim ** -0.5 (Gemma's "
            "query_pre_attn_scalar); None: head_dim.",
            from_hf=rules.scale_dim_from_hf,
        ),
    ] = None

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


class TrainingConfig(_Config, frozen=True):
    """One update = one micro-batch: there is no gradient accumulation."""

    micro_batch_size: PositiveInt
    batch_tokens: PositiveInt
    seed: int = 42
    grad_clip: PositiveFloat = 1.0
    # The autocast every precision runs under; it never varies, and stays for the records
    # that carry it.
    autocast_dtype: Literal["bfloat16"] = "bfloat16"
    # The one precision choice: BF16 autocast alone, or FP8 linears besides
    # (`throughput_schema.precision`). Records from before it ran BF16.
    precision: Precision = "bf16"


OptimizerName = Literal["adamw", "muon"]
# torch.optim.Muon's defaults (Keller Jordan's quintic), the only coefficients measured.
MUON_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
Momentum = Annotated[float, Meta(ge=0, lt=1)]


class OptimizerConfig(_Config, frozen=True):
    """AdamW (the guide's) over every parameter, or Muon over the hidden matrices with AdamW
    over the rest (`throughput_schema.muon` says which). The `muon_*` fields apply only with
    `name: muon`; the AdamW fields apply to AdamW's parameters either way, and Muon takes the
    same `lr` and `weight_decay`."""

    name: OptimizerName = "adamw"
    lr: NonNegFloat = 1e-3
    beta1: Fraction = 0.9
    beta2: Fraction = 0.99
    eps: PositiveFloat = 1e-8
    weight_decay: NonNegFloat = 0.1
    muon_momentum: Momentum = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: Annotated[int, Meta(gt=0, lt=100)] = 5
    muon_ns_coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS
    # Moonshot's scaling (0.2·sqrt(max(rows, cols))), so Muon reuses AdamW's lr and decay;
    # not torch's default "original".
    muon_adjust_lr: Literal["match_rms_adamw", "original"] = "match_rms_adamw"


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
    # A job pending this long for one reason that waiting cannot clear is cancelled and refused:
    # right after sbatch, before its first scheduling passes, Slurm may show a reason that passes.
    # A cluster whose scheduler passes every few seconds may set less.
    never_start_seconds: PositiveFloat = 20.0
    # How long the watcher waits for sacct to complete a finished job's row (a job Slurm ended
    # early may get its exit code minutes later) before keeping what sacct has.
    accounting_grace_seconds: PositiveFloat = 30.0

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
    precision: Precision = _TRAINING.precision
    # Sets the recipe's `optimizer.name` (`PROTOCOL_FIELD_NAMES`): "name" alone would not say what it names.
    optimizer: OptimizerName = _OPTIMIZER.name
    muon_momentum: Momentum = _OPTIMIZER.muon_momentum
    muon_nesterov: bool = _OPTIMIZER.muon_nesterov
    muon_ns_steps: Annotated[int, Meta(gt=0, lt=100)] = _OPTIMIZER.muon_ns_steps
    muon_ns_coefficients: tuple[float, float, float] = _OPTIMIZER.muon_ns_coefficients
    muon_adjust_lr: Literal["match_rms_adamw", "original"] = _OPTIMIZER.muon_adjust_lr
    # Optimizer timing only: each synchronised burst of graph replays targets this.
    burst_seconds: PositiveFloat = 0.1


# A recipe field the protocol sets under another name: (section, recipe field) -> protocol field.
PROTOCOL_FIELD_NAMES = {("optimizer", "name"): "optimizer"}


def protocol_field(section: str, name: str) -> str:
    """The protocol's field that sets recipe field `section.name`."""
    return PROTOCOL_FIELD_NAMES.get((section, name), name)


# The recipe fields the protocol sets, by recipe section, in the section's field order.
PROTOCOL_RECIPE_FIELDS: dict[str, tuple[str, ...]] = {
    section: tuple(
        name for name in config.__struct_fields__ if protocol_field(section, name) in Protocol.__struct_fields__
    )
    for section, config in (("training", TrainingConfig), ("optimizer", OptimizerConfig))
}


def protocol_settings(protocol: Protocol | None, section: str) -> dict[str, object]:
    """The values `protocol` sets in one recipe section (none without a protocol), by recipe field."""
    if protocol is None:
        return {}
    return {name: getattr(protocol, protocol_field(section, name)) for name in PROTOCOL_RECIPE_FIELDS[section]}


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
