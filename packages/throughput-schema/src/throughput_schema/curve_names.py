"""A curve's name, `<model>-c<context>`: its folder under `curves/` and how every output
names it. `throughput_schema.layout` re-exports both functions; they live here, with no
imports, so that the records (`PointSpec.curve`, `Manifest.curves`) can use them too."""

from __future__ import annotations

import re

_CURVE = re.compile(r"^(?P<model>[A-Za-z0-9_.]+)-c(?P<context>[1-9][0-9]*)$")


def curve_name(model: str, context_length: int) -> str:
    return f"{model}-c{context_length}"


def parse_curve_name(name: str) -> tuple[str, int]:
    """(model, context) of a curve name; raises ValueError for anything else."""
    match = _CURVE.match(name)
    if not match:
        raise ValueError(f"not a curve folder name: {name!r} (expected MODEL-cCONTEXT)")
    return match["model"], int(match["context"])


def is_curve_name(name: str) -> bool:
    return _CURVE.match(name) is not None
