"""The audit's own walk of each curve, from the attempts it loaded.

The walk is the audit's reading of the guide (docs/guide.md): batches 1, 2, 4, ... one at a time; a
fitting point leads to the next doubling; a `cuda_oom` ends the curve with the boundary
(largest fitting, first OOM = 2 x largest fitting); anything else blocks it, unless a
person closed the curve on exactly that failed attempt (`closure.json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from throughput_audit.campaign import AttemptRecord, Loaded, kind
from throughput_audit.findings import Checks
from throughput_schema import Manifest
from throughput_schema.audit import CurveFinding
from throughput_schema.layout import CURVES, RESULT, closure_path, curve_name, read_file


def final_attempts(records: list[AttemptRecord]) -> dict[int, AttemptRecord]:
    """Per batch, the latest attempt that counts (void attempts never count)."""
    # Derived here on purpose, not from the schema's `counting_attempts`: the audit checks that rule independently.
    out: dict[int, AttemptRecord] = {}
    for r in records:
        if not r.void:
            b = r.attempt.batch_size
            if b not in out or r.attempt.attempt > out[b].attempt.attempt:
                out[b] = r
    return out


def status(record: AttemptRecord, *, optimizer: bool) -> str:
    """ok, cuda_oom, another outcome kind, 'baseline-<kind>', or 'no-result'."""
    a = record.attempt
    k = kind(a.result)
    if k is None:
        return record.settlement or "no-result"
    if optimizer and k == "ok":
        b = kind(a.baseline)
        if b != "ok":
            return f"baseline-{b or 'missing'}"
    return k


def check_retries(curve: str, records: list[AttemptRecord], checks: Checks) -> None:
    """Attempts at one batch are numbered 1..k and only a failed attempt is ever retried."""
    by_batch: dict[int, list[AttemptRecord]] = {}
    for r in records:
        by_batch.setdefault(r.attempt.batch_size, []).append(r)
    for b, rs in sorted(by_batch.items()):
        numbers = sorted(r.attempt.attempt for r in rs)
        counted = sorted((r for r in rs if not r.void), key=lambda r: r.attempt.attempt)
        retried_ok = [r.attempt.attempt for r in counted[:-1] if kind(r.attempt.result) == "ok"]
        checks.expect(
            "curve.attempts",
            numbers == list(range(1, len(numbers) + 1)) and not retried_ok,
            f"{CURVES}/{curve}/b{b}",
            f"{CURVES}/{curve}/b{b}: attempts {numbers}"
            + (f"; attempt {retried_ok[0]} succeeded yet was retried" if retried_ok else ""),
            attempts=numbers,
        )


@dataclass
class _Walk:
    """Where the walk up the doublings stopped, and what it passed on the way."""

    state: str = "pending"
    fitting: list[int] = field(default_factory=list)
    unstable: list[int] = field(default_factory=list)
    end: int | None = None  # the batch that ended the walk
    first_oom: int | None = None
    blocked: int | None = None
    reason: str = ""


def walk_throughput(
    curve: str, records: list[AttemptRecord], manifest: Manifest, checks: Checks, root: Path | None = None
) -> CurveFinding:
    """`root`, the campaign folder, is where a closure is looked for (None: not looked for)."""
    finals = final_attempts(records)
    where = f"{CURVES}/{curve}"
    present = sorted(finals)
    top = present[-1] if present else 0
    doublings = []
    b = 1
    while b <= max(top, 1):
        doublings.append(b)
        b *= 2
    _check_batches(where, present, top, doublings, finals, manifest.max_batch, checks)
    walk = _walk(finals, doublings if present else [], top, manifest.max_batch, root)
    _check_after_end(where, present, walk, checks)
    largest = walk.fitting[-1] if walk.fitting else None
    if walk.state == "bounded":
        assert walk.first_oom is not None, "a curve is bounded at its first CUDA OOM"
        _check_boundary(finals[walk.first_oom], walk.first_oom, largest, checks)
    state, reason = walk.state, walk.reason
    if root is not None and closure_path(root, curve).exists():
        last = finals.get(walk.end) if walk.end else None
        if check_closure(closure_path(root, curve), where, state, last, checks):
            state, reason = "closed", ""
    checks.expect(
        "curve.finished",
        state != "incomplete" and bool(present),
        where,
        f"{where}: {state}" + (f": {reason}" if reason else "") if present else f"{where}: no points at all",
        state=state,
    )
    return msgspec.structs.replace(
        CurveFinding(curve=curve, state="pending", batches=present),
        state=state if present else "pending",
        fitting_batches=walk.fitting,
        largest_fitting_batch=largest,
        first_oom_batch=walk.first_oom,
        unstable_batches=walk.unstable,
        blocked_batch=walk.blocked,
        blocked_reason=reason if state == "blocked" else "",
    )


def _check_batches(
    where: str,
    present: list[int],
    top: int,
    doublings: list[int],
    finals: dict[int, AttemptRecord],
    cap: int | None,
    checks: Checks,
) -> None:
    """The batches tried are the doublings from 1 with no gap, none above the cap."""
    missing = [b for b in doublings if b <= top and b not in finals]
    odd = [b for b in present if b & (b - 1)]
    checks.expect(
        "curve.contiguous",
        not missing and not odd,
        where,
        f"{where}: batches {present}"
        + (f"; missing {missing} (gap in the doublings from 1)" if missing else "")
        + (f"; {odd} are not doublings of 1" if odd else "")
        + ("" if missing or odd else ": contiguous doublings from 1"),
        batches=present,
        missing=missing,
        not_doublings=odd,
    )
    if cap is not None:
        over = [b for b in present if b > cap]
        checks.expect(
            "curve.cap",
            not over,
            where,
            f"{where}: batches {over} exceed --max-batch {cap}"
            if over
            else f"{where}: all batches within --max-batch {cap}",
            over=over,
            max_batch=cap,
        )


def _walk(
    finals: dict[int, AttemptRecord], doublings: list[int], top: int, cap: int | None, root: Path | None
) -> _Walk:
    """Up the doublings until a batch does not fit: the guide's rule, read from the results."""
    walk = _Walk()
    for b in doublings:
        r = finals.get(b)
        if r is None:
            walk.state, walk.reason, walk.end = "incomplete", f"batch {b} has no attempt", b
            return walk
        s = status(r, optimizer=False)
        if s == "ok":
            walk.fitting.append(b)
            assert r.attempt.result is not None, "an ok status is read from the result"
            tp = r.attempt.result.throughput
            if tp is not None and tp.unstable:
                walk.unstable.append(b)
            continue
        walk.end = b
        if s == "cuda_oom":
            walk.state, walk.first_oom = "bounded", b
        elif s == "no-result":
            walk.state, walk.reason = "incomplete", f"batch {b} ({r.rel}) has no result"
        else:
            walk.state, walk.blocked, walk.reason = "blocked", b, f"batch {b} ({r.rel}) ended {s}"
            if s == "cancelled":
                shown = f" --output {root}" if root is not None else ""
                walk.reason += f" by someone else, not a boundary: retry it with throughput-sweep run{shown} --resume --retry-failed"
        return walk
    if doublings:
        if cap is not None and top * 2 > cap:
            walk.state = "capped"
        else:
            walk.state, walk.reason = "incomplete", f"batch {top} fitted and neither a CUDA OOM nor the cap followed"
    return walk


def _check_after_end(where: str, present: list[int], walk: _Walk, checks: Checks) -> None:
    after = [b for b in present if walk.end is not None and b > walk.end]
    checks.expect(
        "curve.after_end",
        not after,
        where,
        f"{where}: batches {after} exist beyond batch {walk.end}, which ended the curve ({walk.state})"
        if after
        else f"{where}: no batch beyond the curve's end",
        beyond=after,
        end=walk.end,
    )


def _check_boundary(r: AttemptRecord, first_oom: int, largest: int | None, checks: Checks) -> None:
    """A bounded curve's first OOM is twice its largest fitting batch, set by a CUDA OOM."""
    expected_oom = 2 * largest if largest else 1
    checks.expect(
        "curve.boundary",
        first_oom == expected_oom and kind(r.attempt.result) == "cuda_oom",
        r.file(RESULT),
        f"{r.file(RESULT)}: boundary largest fitting {largest}, first OOM {first_oom} "
        f"(2 x largest = {expected_oom}), set by outcome {kind(r.attempt.result)}",
        largest_fitting=largest,
        first_oom=first_oom,
        outcome=kind(r.attempt.result),
    )


def check_closure(path: Path, where: str, state: str, last: AttemptRecord | None, checks: Checks) -> bool:
    """A closure counts only on a blocked curve, naming the failed attempt that blocks it."""
    read = read_file(path)
    shown = f"{where}/{path.name}"
    if read.error:
        checks.fail("curve.closure", shown, read.error)
        return False
    c = read.record
    named = f"batch {c.batch_size} attempt {c.attempt} ({c.outcome})"
    if state != "blocked" or last is None:
        checks.fail("curve.closure", shown, f"{shown}: closes {named}, but the curve is {state}, not blocked")
        return False
    actual = (last.attempt.batch_size, last.attempt.attempt, status(last, optimizer=False))
    return checks.expect(
        "curve.closure",
        (c.curve, c.batch_size, c.attempt, c.outcome) == (Path(where).name, *actual),
        shown,
        f"{shown}: closed by hand on {named} by {c.user}@{c.host} at {c.closed_at}: {c.reason}; "
        f"the curve's last failed attempt is batch {actual[0]} attempt {actual[1]} ({actual[2]})",
        closure=msgspec.to_builtins(c),
    )


def group(loaded: Loaded) -> dict[str, list[AttemptRecord]]:
    out: dict[str, list[AttemptRecord]] = {}
    for r in loaded.attempts:
        out.setdefault(r.attempt.curve, []).append(r)
    return out


def expected_curves(manifest: Manifest) -> list[str]:
    return [curve_name(m, c) for m in manifest.models for c in manifest.contexts]


def planned_grid(manifest: Manifest) -> list[tuple[str, list[int]]]:
    """Each curve of a campaign that walks a planned grid, with its planned batches."""
    return [(name, list(manifest.inherited_batches.get(name, []))) for name in expected_curves(manifest)]


def check_curve_set(loaded: Loaded, checks: Checks) -> None:
    names = set(group(loaded)) | set(loaded.stray_curves)
    extra = sorted(names - set(expected_curves(loaded.manifest)))
    checks.expect(
        "curve.unexpected",
        not extra,
        CURVES,
        f"{CURVES}/: curves {extra} are not in the manifest's models x contexts"
        if extra
        else f"{CURVES}/: only manifest curves",
        curves=extra,
    )


def unstable_record(r: AttemptRecord) -> bool:
    """Its measurement or its baseline's, throughput or optimizer timing, was unstable."""
    res, base = r.attempt.result, r.attempt.baseline
    return any(
        x is not None
        and ((x.throughput and x.throughput.unstable) or (x.optimizer_timing and x.optimizer_timing.unstable))
        for x in (res, base)
    )


def walk_grid(
    name: str, records: list[AttemptRecord], planned: list[int], checks: Checks, *, optimizer: bool
) -> CurveFinding:
    """A curve that walks a planned grid, every batch at once: an optimizer follow-up's
    inherited batches (check optimizer.grid) or a spot check's sample (spot_check.grid).
    Each planned batch measured ok, and nothing else."""
    check, label = ("optimizer.grid", "inherited") if optimizer else ("spot_check.grid", "sampled")
    where = f"{CURVES}/{name}"
    finals = final_attempts(records)
    present = sorted(finals)
    ok = [b for b in present if status(finals[b], optimizer=optimizer) == "ok"]
    failed = {b: status(finals[b], optimizer=optimizer) for b in present if b not in ok}
    missing = [b for b in planned if b not in ok]
    extra = [b for b in present if b not in planned]
    checks.expect(
        check,
        not missing and not extra,
        where,
        f"{where}: measured {ok} of {label} {planned}"
        + (f"; missing {missing}" if missing else "")
        + (f" ({', '.join(f'b{b} {s}' for b, s in failed.items())})" if failed else "")
        + (f"; extra {extra} not in the {label} grid" if extra else ""),
        **{label: planned},
        measured=ok,
        missing=missing,
        extra=extra,
    )
    unstable = [b for b in ok if unstable_record(finals[b])]
    blocked = [b for b in failed if failed[b] not in ("no-result",)]
    return CurveFinding(
        curve=name,
        state="complete" if not missing and not extra else ("blocked" if blocked else "incomplete"),
        batches=present,
        fitting_batches=ok,
        largest_fitting_batch=ok[-1] if ok else None,
        unstable_batches=unstable,
        blocked_batch=blocked[0] if blocked else None,
        blocked_reason="; ".join(f"batch {b}: {failed[b]}" for b in blocked),
    )
