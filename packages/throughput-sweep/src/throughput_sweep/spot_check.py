"""Spot checks: `run --spot-check-from A --points N [--seed S]`.

A fresh campaign re-measures a seeded random sample of N of A's fitting points, each
curve's recommended batch always among them, with A's protocol, recipes and frozen files
(copied, not re-taken from the repository) on A's profile unless another is given. Its
curves walk the sampled batches as an optimizer follow-up walks its inherited grid, every
point at once. When the last point has ended it compares itself with A
(throughput-compare's comparison) and publishes that into `spot-check/` (the layout's
name); status shows the verdict and the audit fails a point that changed.
"""

from __future__ import annotations

import random
from pathlib import Path

from throughput_schema import ClusterProfile, ParentCampaign, SpotCheck
from throughput_schema.codec import SchemaError, read
from throughput_schema.comparison import Comparison, differing
from throughput_schema.digests import sha256_file
from throughput_schema.layout import MANIFEST, SPOT_CHECK, spot_check_comparison
from throughput_sweep.campaign import Campaign, CampaignError, open_campaign, verify_frozen
from throughput_sweep.curves import Curve, is_complete
from throughput_sweep.planning import Plan
from throughput_sweep.recommendations import recommendations

OPTION = "--spot-check-from"


def check_options(args, *, changed_protocol: bool) -> None:
    """The run options a spot check refuses: it takes its grid and protocol from A."""
    if args.spot_check_from is None or (args.points is None and not args.resume):
        raise CampaignError(f"{OPTION} A and --points N go together")
    if args.optimizer_timing_from:
        raise CampaignError(f"{OPTION} and --optimizer-timing-from make different campaigns; choose one")
    if args.models or args.contexts or args.max_batch or changed_protocol:
        raise CampaignError(
            f"{OPTION} re-measures A's points with A's protocol; drop --models, --contexts, --max-batch, "
            "--warmup, --windows, --window-seconds and --optimizer-name"
        )
    if not args.resume:
        try:  # before the profile, which is A's unless given
            open_campaign(args.spot_check_from)
        except CampaignError as exc:
            raise CampaignError(f"{OPTION} {exc}") from None


def sample(curves: list[Curve], points: int, seed: int) -> tuple[dict[str, list[int]], dict[str, int]]:
    """(curve -> sampled batches, curve -> recommended batch): every recommended batch,
    then `points` minus those drawn from the other fitting points with `random.Random(seed)`,
    so the same campaign, N and seed always give the same sample."""
    recommended = {
        name: r.recommended_batch for name, r in recommendations(curves).items() if r.recommended_batch is not None
    }
    pool = [(c.name, b) for c in curves for b in sorted(c.fitting) if recommended.get(c.name) != b]
    drawn = random.Random(seed).sample(pool, points - len(recommended)) + list(recommended.items())
    return {c.name: sorted(b for n, b in drawn if n == c.name) for c in curves}, recommended


def _source(parent_dir: Path) -> Campaign:
    """A, refused unless it is a complete, audited throughput campaign with an intact frozen copy."""
    from throughput_compare.inputs import Refused, load

    parent = open_campaign(parent_dir)
    where = f"{OPTION} {parent_dir}"
    if parent.manifest.kind != "throughput" or parent.manifest.spot_check is not None:
        what = "a spot check" if parent.manifest.spot_check is not None else f"a {parent.manifest.kind} campaign"
        raise CampaignError(f"{where}: {what}; spot-check a throughput campaign")
    curves = parent.curves()
    if not is_complete(curves):
        unfinished = ", ".join(f"{c.name} {c.state}" for c in curves if not c.done or c.state == "blocked")
        raise CampaignError(f"{where}: the campaign is not complete ({unfinished}); finish it first")
    try:
        load(parent_dir, "A")  # the audit gate throughput-compare applies, and every file decodes
    except Refused as exc:
        raise CampaignError(f"{OPTION}: {str(exc).removeprefix('A ')}") from None
    bad = verify_frozen(parent)
    if bad:
        raise CampaignError(
            f"{where}: its frozen files changed since creation ({', '.join(bad[:3])}); it cannot be re-measured as it was"
        )
    return parent


def plan_spot_check(
    output: Path, *, parent_dir: Path, points: int, seed: int, profile: ClusterProfile, root: Path
) -> Plan:
    parent = _source(parent_dir)
    curves = parent.curves()
    fitting = sum(len(c.fitting) for c in curves)
    if points > fitting:
        raise CampaignError(f"--points {points}: {parent_dir} has {fitting} fitting points; ask for at most {fitting}")
    recommended = recommendations(curves)
    needed = sum(r.recommended_batch is not None for r in recommended.values())
    if points < needed:
        raise CampaignError(
            f"--points {points}: the sample always holds each curve's recommended batch ({needed} curves "
            f"recommend one); ask for at least {needed}"
        )
    chosen, picks = sample(curves, points, seed)
    pm = parent.manifest
    threshold = next((r.threshold for r in recommended.values()), 0.0)
    return Plan(
        output,
        "throughput",
        list(pm.models),
        list(pm.contexts),
        pm.protocol,
        profile,
        None,
        pm.worker,
        None,
        root,
        parent=ParentCampaign(
            path=str(Path(parent_dir).resolve()), manifest_sha256=sha256_file(Path(parent_dir) / MANIFEST), name=pm.name
        ),
        inherited=chosen,
        parallel=True,
        frozen_from=parent,
        spot_check=SpotCheck(points=points, seed=seed, recommended=picks, threshold=threshold),
        sources=dict(pm.model_sources),
    )


def finish(campaign: Campaign) -> None:
    """Compare a finished spot check with its source, once (a comparison is never overwritten)."""
    if not spot_check_comparison(campaign.root).exists():
        from throughput_compare.compare import compare
        from throughput_compare.inputs import Refused, load
        from throughput_compare.output import publish

        parent = campaign.manifest.parent
        assert parent is not None, "a spot check names its source campaign as its parent"
        source = Path(parent.path)
        try:
            a = load(source, "A")
            # A passed its audit with a test worker only where someone allowed it
            # (--allow-test-worker, recorded in A's audit.json); the spot check re-runs A's
            # worker, so its comparison carries that permission, and the banner with it.
            comparison = compare(
                a, load(campaign.root, "B", audited=False), allow_test_worker=bool(a.audit_test_worker)
            )
        except Refused as exc:
            raise CampaignError(f"{campaign.root}: the spot check cannot be compared with its source: {exc}") from None
        publish(campaign.root / SPOT_CHECK, comparison)


def failed(campaign: Campaign) -> bool:
    """The compared spot check found a sampled point changed beyond the noise threshold, or
    its comparison cannot be read (no verdict is no pass)."""
    path = spot_check_comparison(campaign.root)
    if not path.exists():
        return False
    try:
        return bool(differing(read(path, Comparison)))
    except SchemaError:
        return True


def verdict_lines(campaign: Campaign) -> list[str]:
    """What status says of a spot check: its sample, and the comparison's verdict once written."""
    m = campaign.manifest
    s, parent = m.spot_check, m.parent
    assert s is not None and parent is not None, "status asks only a spot check, which has both"
    head = f"spot check of {parent.path}: {s.points} points, seed {s.seed}"
    path = spot_check_comparison(campaign.root)
    if not path.exists():
        return [f"{head}: not compared yet (it is compared with its source when every sampled point has ended)"]
    try:
        c = read(path, Comparison)
    except SchemaError as exc:
        return [f"{head}: the comparison cannot be read: {exc}"]
    off = differing(c)
    verdict = (
        f"PASSED: every sampled point within the noise threshold {100 * c.noise.threshold:.2f}%"
        if not off
        else f"FAILED: {len(off)} of {len(c.points)} points changed beyond the noise threshold {100 * c.noise.threshold:.2f}%: "
        + ", ".join(f"{p.curve} b{p.batch_size} {p.verdict} (B/A {p.ratio:.3f})" for p in off)
    )
    return [f"{head}: {verdict}", f"  {c.summary}", f"  comparison: {path.parent}/"]
