"""The precision checks: each result ran at the precision its campaign asked for, and at an
FP8 precision its FP8 linears are the ones the layer filter picks for the model its recipe
builds (`throughput_schema.precision.fp8_plan`, the filter the worker applied).

Which linears the filter picks is the schema's one rule; the audit applies it to the
linears the recipe implies (`throughput_schema.shape.weight_shapes`), not to the result's
own list, so a worker that converted more, fewer or other linears than it says fails here.
That MFU kept its one definition (the dense BF16 peak, also at FP8) is the roofline's
`throughput.peak_flops` check.
"""

from __future__ import annotations

from throughput_audit.findings import Checks
from throughput_schema import Protocol, WorkerResult, outcome_kind
from throughput_schema.precision import fp8_plan, is_fp8, recipe_linears
from throughput_schema.shape import weight_shapes


def check_precision(checks: Checks, file: str, result: WorkerResult, protocol: Protocol) -> None:
    ran = result.recipe.training.precision
    checks.requested("precision.request", file, ran, protocol.precision, "ran at precision")
    if outcome_kind(result.outcome) != "ok":
        return  # a failed or refused point may never have built its model
    if not is_fp8(ran):
        checks.expect(
            "precision.fp8_linears",
            result.fp8 is None,
            file,
            f"{file}: a {ran} point " + ("records no FP8 linears" if result.fp8 is None else "records FP8 linears"),
        )
        return
    converted, kept = fp8_plan(ran, recipe_linears(weight_shapes(result.recipe.model)))
    said = result.fp8
    same = said is not None and said.converted == converted and sorted(said.kept) == sorted(kept)
    reported = "no FP8 record" if said is None else f"{len(said.converted)} FP8 and {len(said.kept)} BF16 linears"
    checks.expect(
        "precision.fp8_linears",
        same,
        file,
        f"{file}: the {ran} filter over the recipe's {len(converted) + len(kept)} linears converts "
        f"{len(converted)} and keeps {len(kept)} BF16; the result says {reported}",
        expected=converted,
        reported=said.converted if said is not None else None,
    )
