"""A curve's name, `<model>-c<context>`: its folder under `curves/` and how every output
names it, and the rule a model's name follows. `throughput_schema.layout` re-exports the
curve functions; they live here, with no imports, so that the records (`PointSpec.curve`,
`Manifest.curves`) can use them too.

A model's name may itself hold `-` and `.` (`smollm2-135m`, `qwen2.5-0.5b`, even
`x-c512`), so a curve name is read from its last `-c<digits>`."""

from __future__ import annotations

import re

# Not `-` first: the name is also a command-line word and a file name.
_CHARS = "A-Za-z0-9_."
_MODEL = rf"[{_CHARS}][{_CHARS}-]*"
_MODEL_NAME = re.compile(_MODEL)
_NOT_IN_NAME = re.compile(rf"[^{_CHARS}-]+")
# The model part is greedy, so the context is the last `-c<digits>`.
_CURVE = re.compile(rf"(?P<model>{_MODEL})-c(?P<context>[1-9][0-9]*)")
MODEL_NAME_RULE = "ASCII letters, digits, '_', '.' and '-', not starting with '-'"


def is_model_name(name: str) -> bool:
    """Whether `name` may name a model (a preset, a curve's model part): see `MODEL_NAME_RULE`."""
    return _MODEL_NAME.fullmatch(name) is not None


def reduced_model_name(text: str) -> str:
    """`text` made a model name: each run of other characters becomes `_` (none at the ends),
    and a leading `-` goes; empty where nothing is left."""
    return _NOT_IN_NAME.sub("_", text).strip("_").lstrip("-")


def curve_name(model: str, context_length: int) -> str:
    return f"{model}-c{context_length}"


def parse_curve_name(name: str) -> tuple[str, int]:
    """(model, context) of a curve name; raises ValueError for anything else."""
    match = _CURVE.fullmatch(name)
    if not match:
        raise ValueError(f"not a curve folder name: {name!r} (expected MODEL-cCONTEXT)")
    return match["model"], int(match["context"])


def is_curve_name(name: str) -> bool:
    return _CURVE.fullmatch(name) is not None
