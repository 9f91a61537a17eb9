"""Model recipes: YAML presets under `configs/` (or a Hugging Face config.json, which
`hf_config` converts), `--set` overrides, validation.

The shape a recipe implies (its tensors, exact parameter count and FLOPs per token) lives
in `throughput_schema.shape`; `parameter_count` and `flops_per_token` are re-exported here
for the callers that load a recipe and count it in one place. No torch here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import msgspec

from throughput_schema import hf_config, knobs
from throughput_schema.codec import SchemaError, convert_input, read_yaml
from throughput_schema.configs import protocol_settings
from throughput_schema.records import ModelConfig, OptimizerConfig, Protocol, Recipe, TrainingConfig

# Re-exported (the `as` form) for callers that load a recipe and count it in one place.
from throughput_schema.shape import flops_per_token as flops_per_token
from throughput_schema.shape import parameter_count as parameter_count

SUPPORTED_CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192)
_SECTIONS = ("model", "training", "optimizer")


class RecipeError(ValueError):
    """A recipe or an override that cannot be used; the message is one line."""


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a preset (or a model's config.json), apply `key=value` overrides, and validate
    the whole recipe."""
    path = Path(path)
    raw = _load_json(path) if path.suffix == ".json" else _load_yaml(path)
    for item in overrides:
        _apply_override(raw, item, path)
    raw.setdefault("name", path.stem)
    return recipe_from_dict(raw, source=str(path))


def recipe_from_dict(raw: dict[str, Any], *, source: str = "recipe") -> Recipe:
    try:
        recipe = convert_input(raw, Recipe)
    except SchemaError as exc:
        raise RecipeError(f"{source}: {exc}{_allowed(str(exc))}") from None
    check_recipe(recipe, source=source)
    return recipe


def _allowed(message: str) -> str:
    """'; use one of ...' for a field with a fixed set of values that msgspec's message names."""
    found = re.search(r"`\$\.(model|training|optimizer)\.(\w+)`", message)
    if not found:
        return ""
    section = {"model": ModelConfig, "training": TrainingConfig, "optimizer": OptimizerConfig}[found[1]]
    kind = get_type_hints(section).get(found[2])
    if kind is bool:
        return "; use true or false"
    options = [kind] if get_origin(kind) is Literal else list(get_args(kind))  # a Literal, maybe in a union
    values = [a for t in options if get_origin(t) is Literal for a in get_args(t)]
    return f"; use one of {', '.join(map(str, values))}" if values else ""


def check_recipe(recipe: Recipe, *, source: str = "recipe") -> None:
    m, t = recipe.model, recipe.training
    problems = knobs.problems(m)
    if problems:
        raise RecipeError(f"{source}: {problems[0]}")
    if m.head_dim % 2:
        raise RecipeError(f"{source}: model.head_dim ({m.head_dim}) must be even: RoPE rotates pairs of values")
    if m.context_length not in SUPPORTED_CONTEXTS:
        raise RecipeError(
            f"{source}: model.context_length={m.context_length} is not supported; "
            f"use a power of two from {SUPPORTED_CONTEXTS[0]} to {SUPPORTED_CONTEXTS[-1]}"
        )
    if t.batch_tokens != t.micro_batch_size * m.context_length:
        raise RecipeError(
            f"{source}: training.batch_tokens={t.batch_tokens} must equal training.micro_batch_size "
            f"x model.context_length = {t.micro_batch_size * m.context_length} (there is no gradient accumulation)"
        )


def at_point(recipe: Recipe, *, context_length: int, batch_size: int, protocol: Protocol | None = None) -> Recipe:
    """The recipe laid over one campaign point: context, batch, and the recipe fields the
    campaign's protocol sets. Not validated: the audit compares it, the sweep checks it."""
    model = msgspec.structs.replace(recipe.model, context_length=context_length)
    training = msgspec.structs.replace(
        recipe.training,
        micro_batch_size=batch_size,
        batch_tokens=batch_size * context_length,
        **protocol_settings(protocol, "training"),
    )
    optimizer = msgspec.structs.replace(recipe.optimizer, **protocol_settings(protocol, "optimizer"))
    return msgspec.structs.replace(recipe, model=model, training=training, optimizer=optimizer)


def with_point(recipe: Recipe, *, context_length: int, batch_size: int, protocol: Protocol | None = None) -> Recipe:
    """The recipe for one campaign point (`at_point`), validated."""
    result = at_point(recipe, context_length=context_length, batch_size=batch_size, protocol=protocol)
    check_recipe(result, source=f"{recipe.name} at context {context_length}, batch {batch_size}")
    return result


# Given only where they differ from their defaults, so that the command a person reproduces a
# point with is the preset's plus what the point changed.
_DEFAULTED_FIELDS = {
    "model": frozenset(knobs.NAMES),
    "optimizer": frozenset(f for f in OptimizerConfig.__struct_fields__ if f.startswith("muon_")),
    "training": frozenset({"precision"}),
}


def override_args(recipe: Recipe) -> list[str]:
    """The `--set` arguments that turn a preset into this recipe, as a person reproduces a
    point with the worker's `--config PRESET --set ...`. A model knob is given only where it
    differs from its default, which a knob not written as one flag (RoPE scaling) keeps."""
    out = []
    for section in _SECTIONS:
        config = getattr(recipe, section)
        for key, value in msgspec.structs.asdict(config).items():
            if key in _DEFAULTED_FIELDS.get(section, ()):
                if value == getattr(type(config)(**_required(config)), key):
                    continue
                if isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
                    value = list(value)  # YAML's flow sequence, which `_scalar` reads back
                elif not isinstance(value, (bool, int, float, str)):
                    raise RecipeError(f"{section}.{key}={value!r} cannot be passed as a --set flag")
            out.append(f"{section}.{key}={value}")
    return out


def _required(config: msgspec.Struct) -> dict[str, Any]:
    """The fields of `config` without a default, to build its all-defaults twin."""
    return {f.name: getattr(config, f.name) for f in msgspec.structs.fields(config) if f.required}


def ceil_updates(parameters: int, tokens_per_update: int, tokens_per_parameter: int = 20) -> int:
    return math.ceil(tokens_per_parameter * parameters / tokens_per_update)


def _load_json(path: Path) -> dict[str, Any]:
    """A Hugging Face config.json, converted, or a recipe written as JSON (a frozen one), read
    as JSON: YAML would read its `1e-08` as a string."""
    try:
        config, sha256 = hf_config.read_config(path)
        if hf_config.looks_like_hf_config(config):
            return hf_config.convert(config, path=path, sha256=sha256).raw
    except hf_config.HfConfigError as exc:
        raise RecipeError(str(exc)) from None
    return config


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = read_yaml(path)
    except FileNotFoundError:
        raise RecipeError(f"{path}: config file not found") from None
    except SchemaError as exc:
        raise RecipeError(str(exc)) from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: expected a mapping with sections {', '.join(_SECTIONS)}")
    return raw


def _apply_override(raw: dict[str, Any], item: str, path: Path) -> None:
    import yaml

    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) != 2 or not all(parts):
        raise RecipeError(f"--set {item!r}: expected SECTION.KEY=VALUE, for example model.context_length=2048")
    section, field = parts
    types = {"model": ModelConfig, "training": TrainingConfig, "optimizer": OptimizerConfig}
    if section not in types:
        raise RecipeError(f"--set {item!r}: unknown section {section!r}; use one of {', '.join(_SECTIONS)}")
    fields = types[section].__struct_fields__
    if field not in fields:
        raise RecipeError(f"--set {item!r}: unknown key {key!r}; {section} keys are {', '.join(fields)}")
    value = _scalar(text.strip(), yaml)
    target = raw.setdefault(section, {})
    if not isinstance(target, dict):
        raise RecipeError(f"{path}: section {section!r} must be a mapping")
    target[field] = value


def _scalar(text: str, yaml) -> Any:
    # YAML 1.1 reads "1e-8" as a string; a user typing --set optimizer.eps=1e-8 means a number.
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return text
