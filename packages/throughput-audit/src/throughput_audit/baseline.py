"""An optimizer point's pair: the uninstrumented baseline and the instrumented worker.

The primary percentage divides one by the other, so the two must describe one point
measured on one device: the same recipe, the baseline uninstrumented and fitting, and the
same GPU (`gpu_uuid`), since two GPUs of one model differ by more than the optimizer's
share at small batches.
"""

from __future__ import annotations

from throughput_audit.campaign import AttemptRecord, kind
from throughput_audit.findings import Checks
from throughput_schema.layout import BASELINE, RESULT


def baseline_matches(record: AttemptRecord, checks: Checks) -> None:
    """The paired baseline ran the same recipe, uninstrumented, in the same allocation."""
    a = record.attempt
    file = record.file(BASELINE)
    if a.baseline is None:
        checks.fail("optimizer.baseline", file, f"{file}: missing (an ok optimizer point needs its paired baseline)")
        return
    assert a.result is not None, "the audit pairs a baseline only with an ok result"
    same = a.baseline.recipe == a.result.recipe
    checks.expect(
        "optimizer.baseline",
        same and a.baseline.mode == "throughput" and kind(a.baseline) == "ok",
        file,
        f"{file}: mode {a.baseline.mode}, outcome {kind(a.baseline)}, recipe "
        + ("equal to" if same else "differs from")
        + " result.json's",
        mode=a.baseline.mode,
        outcome=kind(a.baseline),
        same_recipe=same,
    )
    check_same_gpu(record, checks)


def check_same_gpu(record: AttemptRecord, checks: Checks) -> None:
    a = record.attempt
    if a.baseline is None or a.result is None:
        return
    file = record.file(RESULT)
    base, inst = a.baseline.hardware.gpu_uuid, a.result.hardware.gpu_uuid
    if not base and not inst:
        # Workers before gpu_uuid was recorded: nothing to compare, said as such.
        checks.not_applicable("optimizer.same_gpu", f"{file}: neither worker recorded a GPU UUID", file)
        return
    checks.expect(
        "optimizer.same_gpu",
        base == inst,
        file,
        f"{file}: instrumented worker on {inst or 'no recorded GPU'}, baseline ({BASELINE}) on {base or 'no recorded GPU'}"
        + ("" if base == inst else "; the pair must come from one GPU"),
        result_gpu_uuid=inst,
        baseline_gpu_uuid=base,
    )
