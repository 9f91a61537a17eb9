"""The model's knobs, read from their one declaration: the fields of `ModelConfig` annotated
with a `Knob` (name, type and default from the field, the rest from the `Knob`).

Every reader loops over `KNOBS` instead of naming a knob, so that a new knob is its field,
the model code that builds it (`tiny_llm.model`) and the audit's own formula
(`throughput_audit.stats`); the HF weight map and the kernels' eligibility name one where
they must.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from throughput_schema.configs import ModelConfig
from throughput_schema.knob_rules import Knob, Shapes


@dataclass(frozen=True)
class KnobField:
    name: str
    type: Any
    default: Any
    knob: Knob


def _declared() -> tuple[KnobField, ...]:
    hints = typing.get_type_hints(ModelConfig, include_extras=True)
    found = []
    for field in msgspec.structs.fields(ModelConfig):
        knob = next((m for m in getattr(hints[field.name], "__metadata__", ()) if isinstance(m, Knob)), None)
        if knob is not None:
            found.append(KnobField(field.name, field.type, field.default, knob))
    return tuple(found)


# In the record's field order, which is also the order they are written in.
KNOBS = _declared()
NAMES = tuple(k.name for k in KNOBS)


def knob_values(model: ModelConfig) -> dict[str, Any]:
    """Each knob's value in `model`, by name."""
    return {k.name: getattr(model, k.name) for k in KNOBS}


def layer_tensors(model: ModelConfig) -> Shapes:
    """The tensors `model`'s knobs add to each layer, by their name under the layer."""
    out: Shapes = {}
    for k in KNOBS:
        out |= k.knob.layer_tensors(model, getattr(model, k.name))
    return out


def model_tensors(model: ModelConfig) -> Shapes:
    """The tensors `model`'s knobs add outside the layers."""
    out: Shapes = {}
    for k in KNOBS:
        out |= k.knob.model_tensors(model, getattr(model, k.name))
    return out


def attended_keys(model: ModelConfig) -> int:
    """Keys a token attends to, summed over the layers: the context in every layer, less what
    a knob narrows (a sliding window sees min(context, window) keys)."""
    narrowed: dict[int, int] = {}
    for k in KNOBS:
        narrowed |= k.knob.attended_keys(model, getattr(model, k.name))
    return sum(narrowed.get(i, model.context_length) for i in range(model.n_layers))


def problems(model: ModelConfig) -> list[str]:
    """Why `model`'s knob values cannot be built, one line each."""
    found = (k.knob.check(model, getattr(model, k.name)) for k in KNOBS)
    return [why for why in found if why is not None]


def from_hf(read: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's knobs from a config.json's values as read, by key; a knob whose value is
    None is left out (it takes its default)."""
    values = ((k.name, k.knob.from_hf(read)) for k in KNOBS)
    return {name: value for name, value in values if value is not None}
