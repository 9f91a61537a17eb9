"""Differences a comparison accepts by name (`--allow-difference NAME`): a change of one
kind that is the question being asked (AdamW against Muon), not a changed measurement.

A named difference stops refusing the comparison, and the comparison says at its top what
it accepted, because every ratio then includes that change. Any other protocol or recipe
difference still refuses unless `--allow-protocol-change` is given.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from throughput_schema.comparison import Difference
from throughput_schema.configs import OptimizerConfig

_MUON_FIELDS = tuple(f for f in OptimizerConfig.__struct_fields__ if f.startswith("muon_"))


def _optimizer(d: Difference) -> bool:
    """The optimizer and its settings: the protocol's `optimizer` and `muon_*`, the recipes' `optimizer.name` and
    `optimizer.muon_*` (a recipe difference's field is "MODEL: SECTION.KEY")."""
    if d.area == "protocol":
        return d.field == "optimizer" or d.field in _MUON_FIELDS
    if d.area == "recipe":
        key = d.field.rpartition(": ")[2]
        return key == "optimizer.name" or key.removeprefix("optimizer.") in _MUON_FIELDS
    return False


# name -> (which differences it covers, the protocol field whose values the top line names)
ALLOWABLE: dict[str, tuple[Callable[[Difference], bool], str]] = {"optimizer": (_optimizer, "optimizer")}


def accept(found: list[Difference], names: list[str]) -> list[Difference]:
    """`found` with the named kinds of difference no longer refusing."""
    covered = [ALLOWABLE[n][0] for n in names]
    return [msgspec.structs.replace(d, refuses=False) if any(c(d) for c in covered) else d for d in found]


def remedy(refusing: list[Difference]) -> str:
    """The flag that lets these differences through: a name when one covers them all."""
    for name, (covers, _) in ALLOWABLE.items():
        if all(covers(d) for d in refusing):
            return f"--allow-difference {name}"
    return "--allow-protocol-change"


def accepted_lines(found: list[Difference], names: list[str]) -> list[str]:
    """What the comparison says at its top for each named difference the campaigns have."""
    out = []
    for name in names:
        covers, field = ALLOWABLE[name]
        mine = [d for d in found if covers(d)]
        if not mine:
            continue
        main = next((d for d in mine if d.area == "protocol" and d.field == field), mine[0])
        out.append(
            f"The {name} differs (A {main.a}, B {main.b}; {len(mine)} difference{'s' * (len(mine) > 1)}), "
            f"accepted by --allow-difference {name}: every ratio below includes the {name}'s change."
        )
    return out
