"""The curve summaries `collect` reported (results.json) against the audit's own derivation."""

from __future__ import annotations

from pathlib import Path

import msgspec

from throughput_audit.campaign import AttemptRecord, Loaded
from throughput_audit.curves import final_attempts, group, status
from throughput_audit.findings import Checks
from throughput_schema.audit import CurveFinding
from throughput_schema.codec import not_text
from throughput_schema.layout import RESULTS_JSON


def check_summary(root: Path, checks: Checks, curves: list[CurveFinding], loaded: Loaded, is_opt: bool) -> None:
    """Compare the curves `collect` reported (results.json) with the audit's own derivation."""
    path = root / RESULTS_JSON
    if not path.is_file():
        checks.not_applicable("summary", f"{RESULTS_JSON}: not written yet (run collect); curve summaries not compared")
        return
    data = path.read_bytes()
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        checks.fail("summary", RESULTS_JSON, f"{RESULTS_JSON}: {not_text(data) or f'not valid JSON ({exc})'}")
        return
    reported = _curve_summaries(raw)
    if reported is None:
        checks.fail("summary", RESULTS_JSON, f"{RESULTS_JSON}: no curve summaries found")
        return
    groups = group(loaded)
    for c in curves:
        s = reported.get(c.curve)
        if s is None:
            checks.fail("summary.curve", RESULTS_JSON, f"{RESULTS_JSON}: curve {c.curve} missing", curve=c.curve)
            continue
        state = s.get("state")
        want_state = c.state
        if want_state == "incomplete":
            state_ok = state in ("pending", "running")
        else:
            state_ok = state == want_state
        got = (s.get("largest_fitting_batch"), s.get("first_oom_batch"), list(s.get("fitting_batches") or []))
        want = (c.largest_fitting_batch, c.first_oom_batch, c.fitting_batches)
        detail = ""
        b = s.get("first_oom_batch")
        if b is not None and c.first_oom_batch is None:
            outcome = _outcome_at(groups.get(c.curve, []), b)
            if not outcome.startswith("cuda_oom"):
                detail = f"; only a cuda_oom sets the boundary, batch {b} ended {outcome}"
        checks.expect(
            "summary.curve",
            state_ok and got == want,
            RESULTS_JSON,
            f"{RESULTS_JSON}: {c.curve} reported {state}, largest fitting {got[0]}, first OOM {got[1]}, fitting {got[2]}; "
            f"the raw files give {want_state}, largest fitting {want[0]}, first OOM {want[1]}, fitting {want[2]}{detail}",
            curve=c.curve,
            reported={"state": state, "largest_fitting": got[0], "first_oom": got[1], "fitting": got[2]},
            derived={"state": want_state, "largest_fitting": want[0], "first_oom": want[1], "fitting": want[2]},
        )
        if "unstable_batches" in s:
            checks.expect(
                "summary.unstable",
                sorted(s.get("unstable_batches") or []) == sorted(c.unstable_batches),
                RESULTS_JSON,
                f"{RESULTS_JSON}: {c.curve} unstable batches reported {s.get('unstable_batches')}, derived {c.unstable_batches}",
                reported=s.get("unstable_batches"),
                derived=c.unstable_batches,
            )
        if "fastest_stable_batch" in s:
            fastest = _fastest_stable(groups.get(c.curve, []), c, is_opt)
            checks.expect(
                "summary.fastest",
                s.get("fastest_stable_batch") == (fastest[0] if fastest else None),
                RESULTS_JSON,
                f"{RESULTS_JSON}: {c.curve} fastest stable batch reported {s.get('fastest_stable_batch')}, "
                f"derived {fastest[0] if fastest else None} ({fastest[1] if fastest else None} tok/s)",
                reported=s.get("fastest_stable_batch"),
                derived=fastest[0] if fastest else None,
            )


def _curve_summaries(raw) -> dict[str, dict] | None:
    items = None
    if isinstance(raw, list):
        items = raw
    elif isinstance(raw, dict):
        for key in ("curves", "curve_summaries", "summaries"):
            if isinstance(raw.get(key), list):
                items = raw[key]
                break
    if items is None:
        return None
    out = {}
    for item in items:
        if isinstance(item, dict) and "curve" in item and "state" in item:
            out[item["curve"]] = item
    return out or None


def _outcome_at(records: list[AttemptRecord], batch: int) -> str:
    r = final_attempts(records).get(batch)
    return "nothing (no attempt)" if r is None else f"{status(r, optimizer=False)} ({r.rel})"


def _fastest_stable(records: list[AttemptRecord], curve: CurveFinding, is_opt: bool) -> tuple[int, float] | None:
    finals = final_attempts(records)
    best = None
    for b in curve.fitting_batches:
        if b in curve.unstable_batches:
            continue
        a = finals[b].attempt
        res = a.baseline if is_opt else a.result
        if res is None or res.throughput is None:
            continue
        rate = res.throughput.tokens_per_second
        if best is None or rate > best[1]:
            best = (b, rate)
    return best
