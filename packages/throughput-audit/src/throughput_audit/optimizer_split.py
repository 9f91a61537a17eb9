"""The optimizer checks of every result: it trained with the optimizer its campaign asked for,
and with Muon, the parameters each optimizer owned are the split the recipe implies.

Which matrices Muon owns is the schema's one rule (`throughput_schema.muon.ownership`); the
audit applies it to the model its recipe builds, not to the result's own list, and checks
the split on its own terms too: every parameter of the recipe's model owned by exactly one
optimizer, and Muon's row blocks tiling each of its weights. A worker that updated more,
fewer or other parameters with Muon than its record says fails here.
"""

from __future__ import annotations

import re

from throughput_audit.findings import Checks
from throughput_schema import Protocol, WorkerResult, outcome_kind
from throughput_schema.muon import MUON, ownership
from throughput_schema.shape import weight_shapes

_LABEL = re.compile(r"^(?P<name>.+)\[(?P<start>\d+):(?P<stop>\d+)\]$")


def check_optimizer(checks: Checks, file: str, result: WorkerResult, protocol: Protocol) -> None:
    ran = result.recipe.optimizer.name
    checks.requested("optimizer.request", file, ran, protocol.optimizer, "trained with")
    if outcome_kind(result.outcome) != "ok":
        return  # a failed or refused point may never have built its optimizer
    said = result.optimizer_owned
    expected = ownership(result.recipe.optimizer, result.recipe.model)
    problem = None if said == expected else _describe(said, expected, ran)
    if problem is None and ran == MUON:
        problem = _split_problem(said, weight_shapes(result.recipe.model))
    checks.expect(
        "optimizer.owned",
        problem is None,
        file,
        f"{file}: {problem}" if problem else f"{file}: the parameters each optimizer owned are the recipe's split",
        expected={k: len(v) for k, v in expected.items()},
        reported={k: len(v) for k, v in said.items()},
    )


def _describe(said: dict[str, list[str]], expected: dict[str, list[str]], ran: str) -> str:
    if not expected:
        return f"an {ran} point records parameters owned by {', '.join(sorted(said))}; {ran} owns them all"
    parts = []
    for opt in sorted(set(said) | set(expected)):
        have, want = set(said.get(opt, [])), set(expected.get(opt, []))
        if have != want:
            parts.append(
                f"{opt} owned {len(have)} ({len(have - want)} not in the recipe's split, {len(want - have)} missing)"
            )
    return "; ".join(parts) or "the same parameters in another order"


def _split_problem(said: dict[str, list[str]], shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Each parameter owned once, and Muon's row blocks covering each of its weights exactly."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for label in said.get(MUON, []):
        m = _LABEL.match(label)
        if m is None:
            return f"Muon's entry {label!r} is not name[start:stop]"
        rows.setdefault(m["name"], []).append((int(m["start"]), int(m["stop"])))
    adamw = said.get("adamw", [])
    owned = [*rows, *adamw]
    if sorted(owned) != sorted(shapes) or len(set(adamw)) != len(adamw):
        return f"{len(owned)} parameters owned against the model's {len(shapes)}, each owned once"
    for name, blocks in rows.items():
        edges = sorted(blocks)
        if edges[0][0] != 0 or edges[-1][1] != shapes[name][0] or any(a[1] != b[0] for a, b in zip(edges, edges[1:])):
            return f"Muon's row blocks of {name} do not tile its {shapes[name][0]} rows"
    return None
