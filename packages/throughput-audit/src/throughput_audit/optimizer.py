"""Optimizer-timing campaigns: the inherited grid, burst weighting and primary percentages.

Per window: optimizer ms = sum(burst optimizer_ms x burst updates) / sum(burst updates)
(each burst's events describe its last replay; the window weights those samples by the
burst's update count). Reported optimizer ms = median window value. Primary percentage
= that median / the paired baseline's full-iteration ms, where the baseline's update ms
= 1000 x B x L / its median tokens per second.
"""

from __future__ import annotations

from pathlib import Path

from throughput_audit.campaign import AttemptRecord, Loaded, load
from throughput_audit.curves import group, planned_grid, walk_grid, walk_throughput
from throughput_audit.findings import Checks
from throughput_audit.points import CV_REL, RATE_REL
from throughput_audit.stats import first_difference, median, sample_cv, weighted_mean
from throughput_schema import Manifest, OptimizerTiming, SchemaError, WorkerResult
from throughput_schema.audit import CurveFinding
from throughput_schema.digests import sha256_file
from throughput_schema.layout import BASELINE, BURSTS, MANIFEST, RESULT


def parent_path(root: Path, manifest: Manifest) -> Path | None:
    """The parent campaign: the manifest's path, else a sibling folder of the same name."""
    p = manifest.parent
    assert p is not None, "parent_fitting refused a manifest without a parent"
    candidates = [Path(p.path)]
    if not Path(p.path).is_absolute():
        candidates.append(root / p.path)
    candidates.append(root.parent / Path(p.path).name)
    if p.name:
        candidates.append(root.parent / p.name)
    for c in candidates:
        if (c / MANIFEST).is_file():
            return c
    return None


def parent_fitting(root: Path, manifest: Manifest, checks: Checks) -> dict[str, list[int]] | None:
    """Each parent curve's fitting batches, derived from the parent's own files."""
    if manifest.parent is None:
        checks.fail("optimizer.parent", MANIFEST, f"{MANIFEST}: an optimizer-timing campaign without a parent")
        return None
    path = parent_path(root, manifest)
    if path is None:
        checks.fail(
            "optimizer.parent",
            MANIFEST,
            f"{MANIFEST}: parent campaign {manifest.parent.path} not found; the inherited grid cannot be verified",
            parent=manifest.parent.path,
        )
        return None
    digest = sha256_file(path / MANIFEST)
    checks.expect(
        "optimizer.parent",
        digest == manifest.parent.manifest_sha256,
        MANIFEST,
        f"{MANIFEST}: parent {path}/{MANIFEST} sha256 {digest[:16]}..., recorded {manifest.parent.manifest_sha256[:16]}...",
        parent=str(path),
        actual=digest,
        expected=manifest.parent.manifest_sha256,
    )
    try:
        parent_checks = Checks()
        loaded = load(path, parent_checks, optimizer=False)
    except SchemaError as exc:
        checks.fail("optimizer.parent", MANIFEST, f"parent campaign: {exc}")
        return None
    pm = loaded.manifest
    checks.expect(
        "optimizer.parent_grid",
        pm.kind == "throughput" and pm.models == manifest.models and sorted(pm.contexts) == sorted(manifest.contexts),
        MANIFEST,
        f"{MANIFEST}: models {manifest.models} contexts {manifest.contexts}; parent ({pm.kind}) has models "
        f"{pm.models} contexts {pm.contexts}",
        models=manifest.models,
        contexts=manifest.contexts,
        parent_models=pm.models,
        parent_contexts=pm.contexts,
    )
    groups = group(loaded)
    out = {}
    for name in pm.curves():
        out[name] = walk_throughput(name, groups.get(name, []), pm, Checks()).fitting_batches
    return out


def check_grid(loaded: Loaded, checks: Checks, parent: dict[str, list[int]] | None) -> list[CurveFinding]:
    """The exact inherited grid: every parent fitting batch measured ok, nothing else."""
    m = loaded.manifest
    groups = group(loaded)
    findings = []
    for name, inherited in planned_grid(m):
        if parent is not None:
            want = parent.get(name, [])
            checks.expect(
                "optimizer.inherited",
                inherited == want,
                MANIFEST,
                f"{MANIFEST}: inherited_batches[{name}] = {inherited}, the parent's fitting batches are {want}",
                curve=name,
                inherited=inherited,
                parent=want,
            )
        findings.append(walk_grid(name, groups.get(name, []), inherited, checks, optimizer=True))
    return findings


def optimizer_first_cv_exceeded(record: AttemptRecord, protocol) -> bool:
    """Whether the first windows' optimizer CV (from raw bursts) called for extra windows."""
    per_window = window_values(record, "optimizer_ms")
    if not per_window:
        return False
    first = [v for _, v in sorted(per_window.items())][: protocol.windows]
    return sample_cv(first) > protocol.cv_threshold


def window_values(record: AttemptRecord, field: str) -> dict[int, float]:
    bursts = record.bursts
    if bursts is None and record.attempt.result and record.attempt.result.optimizer_timing:
        bursts = record.attempt.result.optimizer_timing.bursts
    out: dict[int, tuple[list[float], list[float]]] = {}
    for b in bursts or []:
        vals, weights = out.setdefault(b.window, ([], []))
        vals.append(getattr(b, field))
        weights.append(b.updates)
    return {w: weighted_mean(v, u) for w, (v, u) in out.items()}


def check_timing(record: AttemptRecord, checks: Checks, *, protocol, batch: int, context: int) -> float | None:
    """Bursts vs the result, per-window weighting, median, CV, shares; returns the primary percentage."""
    a = record.attempt
    file = record.file(RESULT)
    res, base = a.result, a.baseline
    ot = res.optimizer_timing if res else None
    if res is None or ot is None:
        checks.fail("optimizer.timing", file, f"{file}: an ok optimizer-timing result without optimizer timing")
        return None
    _check_bursts(record, res, ot, checks)
    opt = window_values(record, "optimizer_ms")
    graph = window_values(record, "graph_ms")
    opt_list = [opt[i] for i in sorted(opt)]
    graph_list = [graph[i] for i in sorted(graph)]
    if not opt_list:
        checks.fail("optimizer.window_ms", file, f"{file}: no burst samples to weight")
        return None
    opt_ms = _check_figures(file, res, ot, opt_list, graph_list, protocol, checks)
    if base is None or base.throughput is None:
        checks.fail(
            "optimizer.baseline", record.file(BASELINE), f"{record.file(BASELINE)}: no paired baseline throughput"
        )
        return None
    base_ms = 1000.0 * batch * context / base.throughput.tokens_per_second
    return 100.0 * opt_ms / base_ms


def _check_bursts(record: AttemptRecord, res: WorkerResult, ot: OptimizerTiming, checks: Checks) -> None:
    """The raw burst samples are the result's, and cover exactly each window's updates."""
    bfile = record.file(BURSTS)
    if record.bursts is None:
        # Without the separate file, the raw samples are the ones result.json carries.
        checks.expect(
            "optimizer.bursts",
            bool(ot.bursts),
            bfile,
            f"{bfile}: absent; using the {len(ot.bursts)} raw burst samples recorded in result.json",
            raw=None,
            result=len(ot.bursts),
        )
    else:
        same = list(record.bursts) == list(ot.bursts)
        checks.expect(
            "optimizer.bursts",
            same,
            bfile,
            f"{bfile}: {len(record.bursts)} raw samples "
            + ("equal" if same else "differ from")
            + f" result.json's {len(ot.bursts)} bursts",
            raw=len(record.bursts),
            result=len(ot.bursts),
        )
    bursts = record.bursts if record.bursts is not None else ot.bursts
    windows = res.windows
    covered: dict[int, int] = {}
    for b in bursts:
        covered[b.window] = covered.get(b.window, 0) + b.updates
    wanted = {i: w.updates for i, w in enumerate(windows)}
    checks.expect(
        "optimizer.burst_updates",
        covered == wanted,
        bfile,
        f"{bfile}: burst updates per window {[covered.get(i, 0) for i in range(len(windows))]}, "
        f"window updates {[w.updates for w in windows]}"
        + (
            f"; bursts name windows {sorted(set(covered) - set(wanted))} that do not exist"
            if set(covered) - set(wanted)
            else ""
        ),
        bursts=[covered.get(i, 0) for i in range(len(windows))],
        windows=[w.updates for w in windows],
    )


def _check_figures(
    file: str,
    res: WorkerResult,
    ot: OptimizerTiming,
    opt_list: list[float],
    graph_list: list[float],
    protocol,
    checks: Checks,
) -> float:
    """The result's optimizer figures recomputed from the update-weighted windows; returns the
    median window optimizer ms."""
    reported = list(ot.window_optimizer_ms)
    i = first_difference(opt_list, reported, rel=RATE_REL)
    checks.figure(
        "optimizer.window_ms",
        file,
        opt_list,
        reported,
        what="update-weighted window optimizer ms",
        suffix="" if i is None else f"; first difference at window {i}",
        rel=RATE_REL,
    )
    checks.figure(
        "optimizer.window_graph_ms",
        file,
        graph_list,
        list(ot.window_graph_ms),
        what="update-weighted window graph ms",
        rel=RATE_REL,
    )
    opt_ms = median(opt_list)
    cv = sample_cv(opt_list)
    checks.figure("optimizer.median_ms", file, opt_ms, ot.optimizer_ms, what="median window optimizer ms", rel=RATE_REL)
    checks.figure("optimizer.cv", file, cv, ot.optimizer_cv, what="optimizer CV", rel=CV_REL)
    unstable = cv > protocol.cv_threshold
    checks.figure(
        "optimizer.unstable",
        file,
        unstable,
        ot.unstable,
        message=f"optimizer CV {cv:.4%} vs {protocol.cv_threshold:.0%} means unstable={unstable}, result says {ot.unstable}",
    )
    # Shares as the guide (docs/guide.md) defines them: of the instrumented worker's wall time per update
    # (median over windows of window ms / window updates) and of the captured graph's time.
    graph_ms = median(graph_list) if graph_list else 0.0
    share_graph = min(1.0, opt_ms / graph_ms) if graph_ms else 0.0
    checks.figure(
        "optimizer.share_of_graph",
        file,
        share_graph,
        ot.share_of_graph,
        what="optimizer share of graph time",
        how=f" ({opt_ms!r} / median graph ms {graph_ms!r})",
        rel=1e-6,
    )
    wall_ms = median([1000.0 * w.seconds / w.updates for w in res.windows])
    share_wall = min(1.0, opt_ms / wall_ms)
    checks.figure(
        "optimizer.share_of_wall",
        file,
        share_wall,
        ot.share_of_wall,
        what="optimizer share of instrumented wall time",
        how=f" ({opt_ms!r} / median {wall_ms!r} ms per update)",
        rel=1e-6,
    )
    return opt_ms
