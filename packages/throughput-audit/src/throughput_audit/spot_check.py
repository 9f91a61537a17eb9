"""Spot checks (`throughput-sweep run --spot-check-from A`): the sampled grid, and the
comparison with A that the sweep published in `spot-check/`.

The sample: every sampled batch is one of A's fitting batches (derived from A's own
files), each curve's recommended batch is among them, and each was measured ok here and
nothing else was. The comparison: it names this campaign's counting rates exactly, and
every sampled point is in it; a point whose verdict is faster or slower (a change beyond
the stated noise threshold and the point's own uncertainty) fails the audit.
"""

from __future__ import annotations

from pathlib import Path

from throughput_audit.campaign import Loaded
from throughput_audit.curves import final_attempts, group, planned_grid, walk_grid
from throughput_audit.findings import Checks
from throughput_audit.optimizer import parent_fitting
from throughput_audit.points import RATE_REL
from throughput_audit.stats import close
from throughput_schema.audit import CurveFinding
from throughput_schema.codec import SchemaError, read
from throughput_schema.comparison import Comparison, differing
from throughput_schema.layout import MANIFEST, SPOT_CHECK, spot_check_comparison


def check_sample(loaded: Loaded, checks: Checks, root: Path) -> list[CurveFinding]:
    m = loaded.manifest
    assert m.spot_check is not None, "the audit checks a spot check's sample only"
    parent = parent_fitting(root, m, checks)
    groups = group(loaded)
    findings = []
    for name, sampled in planned_grid(m):
        if parent is not None:
            outside = [b for b in sampled if b not in parent.get(name, [])]
            checks.expect(
                "spot_check.sample", not outside, MANIFEST,
                f"{MANIFEST}: {name} sampled {sampled}; not fitting in the source: {outside}",
                curve=name, sampled=sampled, outside=outside,
            )  # fmt: skip
        recommended = m.spot_check.recommended.get(name)
        if recommended is not None:
            checks.expect(
                "spot_check.recommended", recommended in sampled, MANIFEST,
                f"{MANIFEST}: {name} recommended batch {recommended}, sampled {sampled}",
                curve=name, recommended=recommended, sampled=sampled,
            )  # fmt: skip
        findings.append(walk_grid(name, groups.get(name, []), sampled, checks, optimizer=False))
    return findings


def check_comparison(loaded: Loaded, checks: Checks, root: Path) -> None:
    path = spot_check_comparison(root)
    rel = f"{SPOT_CHECK}/{path.name}"
    if not path.is_file():
        checks.fail(
            "spot_check.comparison", rel,
            f"{rel}: not written; it is written when every sampled point has ended: "
            f"throughput-sweep run --output {root} --resume",
        )  # fmt: skip
        return
    try:
        c = read(path, Comparison)
    except SchemaError as exc:
        checks.fail("spot_check.comparison", rel, str(exc))
        return
    finals = {name: final_attempts(records) for name, records in group(loaded).items()}
    compared = {(p.curve, p.batch_size): p for p in c.points}
    for name, batches in loaded.manifest.inherited_batches.items():
        for b in batches:
            record = finals.get(name, {}).get(b)
            result = record.attempt.result if record else None
            p = compared.get((name, b))
            if result is None or result.throughput is None:
                continue  # the grid check names a point without a measurement
            rate = result.throughput.tokens_per_second
            checks.expect(
                "spot_check.compared", p is not None and close(p.tokens_per_second_b, rate, rel=RATE_REL), rel,
                f"{rel}: {name} b{b} measured {rate:,.1f} tok/s here; the comparison has "
                + ("no such point" if p is None else f"{p.tokens_per_second_b:,.1f}"),
                curve=name, batch=b, measured=rate, compared=None if p is None else p.tokens_per_second_b,
            )  # fmt: skip
    off = {(p.curve, p.batch_size) for p in differing(c)}
    for p in c.points:
        checks.expect(
            "spot_check.within_noise", (p.curve, p.batch_size) not in off, rel,
            f"{rel}: {p.curve} b{p.batch_size} re-measured at B/A {p.ratio:.4f} ± {p.ratio_uncertainty:.4f}: "
            f"{p.verdict}, against the stated noise threshold {100 * c.noise.threshold:.2f}%",
            curve=p.curve, batch=p.batch_size, ratio=p.ratio, verdict=p.verdict, threshold=c.noise.threshold,
        )  # fmt: skip
