"""Pairing throughput campaigns with their optimizer-timing follow-ups, and their grids.

Campaigns pair by argument order: the first `--throughput` with the first
`--optimizer`, and so on. Everything that makes a pair unusable is refused here,
before any arithmetic: different counts, the wrong kind, an optimizer campaign
measured from another parent, a context in two pairs, incomplete grids, and an
optimizer point whose baseline and instrumented worker ran on different GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from throughput_report.inputs import Refused, ReportAttempt, ReportCampaign
from throughput_schema import CurveClosure, outcome_kind
from throughput_schema.layout import counting_attempts, curve_name, parse_curve_name


@dataclass(frozen=True)
class PairedCurve:
    """One model at one context in a throughput campaign, as its files end it."""

    model: str
    context: int
    # The attempt that counts at every batch where it has a result, by batch.
    finals: dict[int, ReportAttempt]
    fitting: list[int]
    first_oom: int | None
    capped: bool
    closed: CurveClosure | None = None  # ended by a person's decision; never a boundary

    @property
    def name(self) -> str:
        return curve_name(self.model, self.context)

    @property
    def largest_fitting(self) -> int | None:
        return self.fitting[-1] if self.fitting else None


@dataclass(frozen=True)
class OptimizerPoint:
    """An inherited point measured twice in one allocation: baseline, then instrumented."""

    model: str
    context: int
    batch: int
    attempt: ReportAttempt


@dataclass(frozen=True)
class Pair:
    throughput: ReportCampaign
    optimizer: ReportCampaign
    curves: dict[str, PairedCurve]
    # curve name -> batch -> the optimizer campaign's point
    points: dict[str, dict[int, OptimizerPoint]]

    @property
    def label(self) -> str:
        return f"{self.throughput.name} + {self.optimizer.name}"


def _final_attempts(campaign: ReportCampaign, curve: str) -> tuple[dict[int, ReportAttempt], dict[int, ReportAttempt]]:
    """Per batch: the attempt that counts (the schema's rule) where it has a result, and the one that counts."""
    latest = counting_attempts(
        (a for a in campaign.attempts if a.curve == curve),
        point=lambda a: a.batch,
        number=lambda a: a.attempt,
        void=lambda a: a.void,
    )
    return {b: a for b, a in latest.items() if a.result is not None}, latest


def throughput_curves(campaign: ReportCampaign) -> dict[str, PairedCurve]:
    """Every curve of a throughput campaign; refuses a curve not ended by a boundary or cap."""
    curves: dict[str, PairedCurve] = {}
    cap = campaign.manifest.max_batch
    for name in campaign.curves():
        model, context = parse_curve_name(name)
        finals, latest = _final_attempts(campaign, name)
        if not finals:
            raise Refused(f"throughput campaign {campaign.name}: curve {name} has no results; the grid is incomplete")
        top = max(latest)
        if latest[top].result is None:
            raise Refused(
                f"throughput campaign {campaign.name}: curve {name} b{top} has no result yet "
                f"({latest[top].path.name}); the grid is incomplete"
            )
        fitting = [b for b in sorted(finals) if outcome_kind(finals[b].measured.outcome) == "ok"]
        last_kind = outcome_kind(finals[top].measured.outcome)
        first_oom = None
        capped = False
        closure = campaign.closures.get(name)
        if last_kind == "cuda_oom":
            first_oom = top
        elif last_kind == "capped" or (last_kind == "ok" and cap is not None and 2 * top > cap):
            capped = True
        elif closure is not None and (closure.batch_size, closure.attempt, closure.outcome) == (
            top,
            latest[top].attempt,
            last_kind,
        ):
            pass  # closed by hand on exactly this failure
        else:
            ending = "fits, and no larger batch was measured" if last_kind == "ok" else f"ended with {last_kind}"
            raise Refused(
                f"throughput campaign {campaign.name}: curve {name} is not ended by a confirmed CUDA OOM "
                f"or the batch cap (b{top} {ending}); the grid is incomplete; retry it, or end it by a "
                f"recorded decision with throughput-sweep close-curve"
            )
        curves[name] = PairedCurve(
            model=model,
            context=context,
            finals=finals,
            fitting=fitting,
            first_oom=first_oom,
            capped=capped,
            closed=closure if not (first_oom or capped) else None,
        )
    return curves


def optimizer_points(
    campaign: ReportCampaign, curves: dict[str, PairedCurve], parent_name: str
) -> dict[str, dict[int, OptimizerPoint]]:
    """Every inherited point of an optimizer campaign, each with a result and a baseline that fit."""
    manifest = campaign.manifest
    out: dict[str, dict[int, OptimizerPoint]] = {}
    for name, curve in curves.items():
        inherited = manifest.inherited_batches.get(name, curve.fitting if not manifest.inherited_batches else None)
        if inherited is None:
            raise Refused(f"optimizer campaign {campaign.name}: manifest inherits no batches for curve {name}")
        if list(inherited) != curve.fitting:
            raise Refused(
                f"optimizer campaign {campaign.name}: curve {name} inherits batches {list(inherited)}, but "
                f"throughput campaign {parent_name} fits {curve.fitting}"
            )
        finals, _ = _final_attempts(campaign, name)
        points: dict[int, OptimizerPoint] = {}
        for batch in inherited:
            attempt = finals.get(batch)
            problem = None
            if attempt is None:
                problem = "has no result.json"
            elif outcome_kind(attempt.measured.outcome) != "ok":
                problem = f"ended with {outcome_kind(attempt.measured.outcome)}"
            elif attempt.baseline is None:
                problem = "has no baseline.json"
            elif outcome_kind(attempt.baseline.outcome) != "ok":
                problem = f"has a baseline that ended with {outcome_kind(attempt.baseline.outcome)}"
            elif attempt.baseline.hardware.gpu_uuid != attempt.measured.hardware.gpu_uuid:
                # The primary percentage divides one worker's figure by the other's: two GPUs
                # of one model differ by more than the optimizer's share at small batches.
                raise Refused(
                    f"optimizer campaign {campaign.name}: inherited point {name} b{batch} ran its baseline on "
                    f"{attempt.baseline.hardware.gpu_uuid or 'an unrecorded GPU'} and its instrumented worker on "
                    f"{attempt.measured.hardware.gpu_uuid or 'an unrecorded GPU'}; the pair must come from one GPU"
                )
            if problem:
                raise Refused(
                    f"optimizer campaign {campaign.name}: inherited point {name} b{batch} {problem}; "
                    "the grid is incomplete"
                )
            assert attempt is not None, "a missing attempt is a problem, refused above"
            points[batch] = OptimizerPoint(model=curve.model, context=curve.context, batch=batch, attempt=attempt)
        out[name] = points
    return out


def pair_campaigns(throughput: list[ReportCampaign], optimizer: list[ReportCampaign]) -> list[Pair]:
    """Pair by argument order and refuse anything that cannot be reported together."""
    for campaign in throughput:
        if campaign.manifest.kind != "throughput":
            raise Refused(f"{campaign.name} is an {campaign.manifest.kind} campaign, given to --throughput")
    for campaign in optimizer:
        if campaign.manifest.kind != "optimizer-timing":
            raise Refused(f"{campaign.name} is a {campaign.manifest.kind} campaign, given to --optimizer")
    seen: dict[int, str] = {}
    for tc, oc in zip(throughput, optimizer):
        parent = oc.manifest.parent
        if parent is None:
            raise Refused(f"optimizer campaign {oc.name} records no parent campaign; it cannot pair with {tc.name}")
        same = (
            parent.manifest_sha256 == tc.manifest_sha256
            if parent.manifest_sha256
            else Path(parent.path).resolve() == tc.path.resolve()
        )
        if not same:
            raise Refused(
                f"optimizer campaign {oc.name} was measured from {parent.path or parent.name}, not from its pair "
                f"{tc.name} (campaigns pair by argument order; manifest SHA-256 differs)"
            )
        if sorted(oc.manifest.contexts) != sorted(tc.manifest.contexts) or oc.manifest.models != tc.manifest.models:
            raise Refused(
                f"optimizer campaign {oc.name} covers models {oc.manifest.models} at contexts "
                f"{oc.manifest.contexts}, but its pair {tc.name} covers {tc.manifest.models} at {tc.manifest.contexts}"
            )
        for context in tc.manifest.contexts:
            if context in seen:
                raise Refused(
                    f"context {context} appears in both {seen[context]} and {tc.name}; "
                    "each context must come from one campaign pair"
                )
            seen[context] = tc.name
    pairs = []
    for tc, oc in zip(throughput, optimizer):
        curves = throughput_curves(tc)
        pairs.append(Pair(throughput=tc, optimizer=oc, curves=curves, points=optimizer_points(oc, curves, tc.name)))
    return pairs
