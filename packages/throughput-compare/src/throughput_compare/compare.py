"""Comparing two loaded campaigns: per point a ratio and verdict, per curve the
boundary, the fastest stable batch and a recommendation, and the one-line summary."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from throughput_compare.allowed import accept, accepted_lines, remedy
from throughput_compare.differences import differences
from throughput_compare.inputs import Campaign, Measured, Refused
from throughput_compare.precision import without_fp8_linears
from throughput_schema import noise as spread
from throughput_schema.comparison import Comparison, CurveComparison, InputFile, Noise, PointComparison, Recommendation
from throughput_schema.provenance import WorkerRefused, worker_banner
from throughput_schema.recommendation import campaign_recommendations, gpu_memory_bytes


def _change(a, b):
    return None if a is None or b is None else b - a


def _point(a: Measured, b: Measured, threshold: float) -> PointComparison:
    sa, sb = a.window_spread, b.window_spread
    ratio, u = spread.ratio_with_uncertainty(a.rate, b.rate, sa, sb)
    return PointComparison(
        curve=a.curve,
        batch_size=a.batch,
        attempt_a=a.attempt,
        attempt_b=b.attempt,
        tokens_per_second_a=a.rate,
        tokens_per_second_b=b.rate,
        window_spread_a=sa,
        window_spread_b=sb,
        ratio=ratio,
        ratio_uncertainty=u,
        verdict=spread.verdict(ratio, u, threshold),
        unstable_a=a.unstable,
        unstable_b=b.unstable,
        reserved_bytes_a=a.reserved_bytes,
        reserved_bytes_b=b.reserved_bytes,
        reserved_change_bytes=_change(a.reserved_bytes, b.reserved_bytes),
        setup_seconds_a=a.result.setup_seconds,
        setup_seconds_b=b.result.setup_seconds,
        setup_change_seconds=_change(a.result.setup_seconds, b.result.setup_seconds),
    )


def _fastest_stable(campaign: Campaign, curve: str) -> int | None:
    stable = [p for p in campaign.points.values() if p.curve == curve and not p.unstable]
    return max(stable, key=lambda p: p.rate).batch if stable else None


def curve_recommendation(campaign: Campaign, curve: str, threshold: float) -> Recommendation:
    points = [p for p in campaign.points.values() if p.curve == curve]
    return campaign_recommendations(
        [r for r in campaign.rates() if r.curve == curve],
        first_oom={curve: campaign.first_oom(curve)},
        gpu_memory_bytes=gpu_memory_bytes(p.result for p in points),
        threshold=threshold,
    )[curve]


def _curve(a: Campaign, b: Campaign, curve: str, points: list[PointComparison], threshold: float) -> CurveComparison:
    mine = [p for p in points if p.curve == curve]
    oom_a, oom_b = a.first_oom(curve), b.first_oom(curve)
    fast_a, fast_b = _fastest_stable(a, curve), _fastest_stable(b, curve)
    if b.spot_check:  # a sample: neither its boundary nor its fastest batch was measured again
        oom_b, fast_b = oom_a, fast_a  # so neither is reported as moved; the tables say "not re-measured"
    return CurveComparison(
        curve=curve,
        points=len(mine),
        faster=sum(p.verdict == spread.FASTER for p in mine),
        slower=sum(p.verdict == spread.SLOWER for p in mine),
        same=sum(p.verdict == spread.SAME for p in mine),
        first_oom_a=oom_a,
        first_oom_b=oom_b,
        boundary_moved=oom_a != oom_b,
        fastest_stable_a=fast_a,
        fastest_stable_b=fast_b,
        fastest_changed=fast_a != fast_b,
        recommendation_a=curve_recommendation(a, curve, threshold),
        recommendation_b=curve_recommendation(b, curve, threshold),
    )


def boundary_text(curve: CurveComparison) -> str:
    def show(batch):
        return "none" if batch is None else str(batch)

    return f"{curve.curve}: first OOM {show(curve.first_oom_a)} → {show(curve.first_oom_b)}"


def summary(points: list[PointComparison], curves: list[CurveComparison], spot_check: bool = False) -> str:
    """One sentence: how B moved against A, on how many points, and which boundaries moved."""
    if not points:
        return "A and B share no measured point; nothing to compare."
    parts = []
    for name in (spread.FASTER, spread.SLOWER):
        chosen = [p.ratio for p in points if p.verdict == name]
        if chosen:
            change = abs(spread.median(chosen) - 1.0) * 100.0
            parts.append(f"{change:.1f}% {name} on {len(chosen)} of {len(points)} points")
    same = sum(p.verdict == spread.SAME for p in points)
    if same:
        parts.append(f"the same on {same}" + ("" if parts else f" of {len(points)} points"))
    moved = [boundary_text(c) for c in curves if c.boundary_moved]
    if spot_check:
        return f"B is {', '.join(parts)} (a spot check: the sampled points only; boundaries not re-measured)."
    bounds = (
        "no boundary moved"
        if not moved
        else f"{len(moved)} boundar{'y' if len(moved) == 1 else 'ies'} moved ({'; '.join(moved)})"
    )
    return f"B is {', '.join(parts)}; {bounds}."


def _banner(a: Campaign, b: Campaign, allow_test_worker: bool) -> str:
    labelled = ((f"{label} {c.path}", w) for label, c in (("A", a), ("B", b)) for w in c.workers)
    try:
        return worker_banner(labelled, allow_test_worker=allow_test_worker)
    except WorkerRefused as exc:
        raise Refused(str(exc)) from None


def compare(
    a: Campaign,
    b: Campaign,
    *,
    allow_protocol_change: bool = False,
    allow_test_worker: bool = False,
    allow_differences: list[str] | None = None,
) -> Comparison:
    banner = _banner(a, b, allow_test_worker)  # first: a test worker's figures are no comparison at all
    if a.manifest.kind != b.manifest.kind:
        raise Refused(
            f"A is a {a.manifest.kind} campaign and B a {b.manifest.kind} one; compare campaigns of the same kind"
        )
    named = list(allow_differences or [])
    found = accept(differences(a, b), named)
    refusing = [d for d in found if d.refuses]
    if refusing and not allow_protocol_change:
        d = refusing[0]
        raise Refused(
            f"the campaigns differ in {d.area} ({d.field}: A {d.a}, B {d.b}"
            + (f", and {len(refusing) - 1} more" if len(refusing) > 1 else "")
            + f"); pass {remedy(refusing)} to compare them anyway"
        )
    noise = Noise(
        window_spread_a=a.window_spread(),
        window_spread_b=b.window_spread(),
        run_to_run_a=a.run_to_run(),
        run_to_run_b=b.run_to_run(),
        formulas={
            "window_spread": spread.WINDOW_SPREAD_FORMULA,
            "ratio": spread.RATIO_FORMULA,
            "run_to_run": spread.RUN_TO_RUN_FORMULA,
            "threshold": spread.THRESHOLD_FORMULA,
            "verdict": spread.VERDICT_RULE,
        },
    )
    threshold = spread.noise_threshold(
        [noise.window_spread_a, noise.window_spread_b, noise.run_to_run_a, noise.run_to_run_b]
    )
    noise = msgspec.structs.replace(noise, threshold=threshold)
    names = list(dict.fromkeys([*a.curves(), *b.curves()]))  # the manifests' order: models, then contexts
    shared = sorted(
        set(a.points) & set(b.points), key=lambda k: (names.index(k[0]) if k[0] in names else len(names), k[1])
    )
    points = [_point(a.points[k], b.points[k], threshold) for k in shared]
    curves = [_curve(a, b, c, points, threshold) for c in names]
    return Comparison(
        kind=a.manifest.kind,
        a=str(a.path),
        b=str(b.path),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        summary=summary(points, curves, b.spot_check),
        allow_protocol_change=allow_protocol_change,
        noise=noise,
        points=points,
        curves=curves,
        differences=found,
        only_in_a=[f"{c} b{n}" for c, n in sorted(set(a.points) - set(b.points))],
        only_in_b=[f"{c} b{n}" for c, n in sorted(set(b.points) - set(a.points))],
        inputs=[InputFile(path=p, sha256=h) for p, h in (*a.hashes, *b.hashes)],
        spot_check=b.spot_check,
        test_worker=banner,
        accepted=accepted_lines(found, named),
        no_fp8_linears=without_fp8_linears(a, b),
    )
