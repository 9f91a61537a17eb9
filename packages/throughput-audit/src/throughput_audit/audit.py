"""The audit: load a campaign, run every check, write audit.json and accounting.txt.

`run_audit` is the library entry point (the command line is a thin wrapper); its
`runner` argument replaces the sacct subprocess in tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from throughput_schema import AccountingRow, SchemaError, write_atomic
from throughput_schema.layout import ACCOUNTING, AUDIT, BASELINE, FROZEN, MANIFEST, RECIPES, RECEIPT, RESULT, RESULTS_JSON

from throughput_audit import __version__, optimizer, slurm
from throughput_audit.campaign import (
    AttemptRecord,
    Loaded,
    check_attempt_files,
    check_curve_set,
    check_frozen,
    check_retries,
    frozen_recipe,
    group,
    kind,
    load,
    walk_throughput,
)
from throughput_audit.findings import AUDIT_VERSION, AuditReport, Checks, CurveFinding
from throughput_audit.points import check_point_recipe, check_throughput


class UsageError(Exception):
    """The folder is not a campaign, or its manifest cannot be read; one line."""


@dataclass
class Outcome:
    report: AuditReport
    accounting: str


def run_audit(
    root: Path,
    *,
    runner: slurm.Runner | None = None,
    slurm_checks: bool = True,
    settle_seconds: float = 15.0,
) -> Outcome:
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such campaign folder")
    if not (root / MANIFEST).is_file():
        raise UsageError(f"{root}: not a campaign (no {MANIFEST})")
    checks = Checks()
    try:
        from throughput_schema.layout import load_manifest

        manifest = load_manifest(root)
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    is_opt = manifest.kind == "optimizer-timing"
    loaded = load(root, checks, optimizer=is_opt)

    check_frozen(loaded, checks)
    check_curve_set(loaded, checks)
    recipes = {m: frozen_recipe(loaded, m, checks) for m in manifest.models}
    for record in loaded.attempts:
        check_attempt_files(loaded, record, checks)
        check_result(loaded, record, checks, recipes, is_opt)
        check_recorded_accounting(record, checks)

    groups = group(loaded)
    curves: list[CurveFinding]
    if is_opt:
        parent = optimizer.parent_fitting(root, manifest, checks)
        curves = optimizer.check_grid(loaded, checks, parent)
        for name, records in sorted(groups.items()):
            check_retries(name, records, checks)
    else:
        curves = []
        for model in manifest.models:
            for context in manifest.contexts:
                name = f"{model}-c{context}"
                records = groups.get(name, [])
                check_retries(name, records, checks)
                curves.append(walk_throughput(name, records, manifest, checks))
    check_summary(root, checks, curves, loaded, is_opt)

    if manifest.profile.scheduler == "local" or not slurm_checks:
        checks.not_applicable(
            "slurm",
            f"{MANIFEST}: profile {manifest.profile.name!r} uses the local scheduler: Slurm accounting is not applicable"
            if manifest.profile.scheduler == "local"
            else "Slurm accounting checks were skipped",
            MANIFEST,
        )
        accounting = f"# {manifest.name}: scheduler {manifest.profile.scheduler}; Slurm accounting not applicable\n"
        if manifest.profile.scheduler == "local":
            accounting += check_local_concurrency(loaded, checks)
        slurm_state = "not_applicable"
    else:
        accounting = check_slurm(loaded, checks, runner=runner, settle_seconds=settle_seconds)
        slurm_state = "checked"

    report = AuditReport(
        audit_version=AUDIT_VERSION,
        campaign=str(root),
        name=manifest.name,
        kind=manifest.kind,
        audited_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        slurm=slurm_state,
        summary=checks.summary(),
        curves=curves,
        checks=checks.items,
    )
    return Outcome(report=report, accounting=accounting)


def write_outputs(root: Path, outcome: Outcome) -> None:
    data = msgspec.json.format(msgspec.json.encode(outcome.report), indent=2) + b"\n"
    write_atomic(Path(root) / AUDIT, data)
    write_atomic(Path(root) / ACCOUNTING, outcome.accounting)


# ---------------------------------------------------------------------------- results


def check_result(loaded: Loaded, record: AttemptRecord, checks: Checks, recipes, is_opt: bool) -> None:
    a, m = record.attempt, loaded.manifest
    res = a.result
    if res is None or record.void:
        return
    file = record.file(RESULT)
    frozen, frozen_file = recipes.get(a.model, (None, f"{FROZEN}/{RECIPES}/{a.model}.json"))
    if a.model not in m.models:
        return  # reported by curve.unexpected
    check_point_recipe(
        checks,
        file,
        res,
        model=a.model,
        batch=a.batch_size,
        context=a.context_length,
        protocol=m.protocol,
        frozen=frozen,
        frozen_file=frozen_file,
    )
    checks.expect(
        "result.protocol",
        res.protocol == m.protocol,
        file,
        f"{file}: result protocol " + ("equals" if res.protocol == m.protocol else f"{res.protocol} differs from")
        + " the manifest's",
    )
    want_mode = "optimizer-timing" if is_opt else "throughput"
    checks.expect(
        "result.mode",
        res.mode == want_mode,
        file,
        f"{file}: mode {res.mode}, campaign kind {m.kind}",
        mode=res.mode,
        expected=want_mode,
    )
    if kind(res) != "ok":
        return
    if not is_opt:
        check_throughput(checks, file, res, batch=a.batch_size, context=a.context_length, protocol=m.protocol)
        return
    # The instrumented worker: five more windows when throughput or optimizer CV exceeded the threshold.
    by_opt = optimizer.optimizer_first_cv_exceeded(record, m.protocol)
    check_throughput(
        checks, file, res, batch=a.batch_size, context=a.context_length, protocol=m.protocol, extended_by_optimizer=by_opt
    )
    optimizer.baseline_matches(record, checks)
    if a.baseline is not None and kind(a.baseline) == "ok":
        bfile = record.file(BASELINE)
        check_throughput(checks, bfile, a.baseline, batch=a.batch_size, context=a.context_length, protocol=m.protocol)
    pct = optimizer.check_timing(record, checks, protocol=m.protocol, batch=a.batch_size, context=a.context_length)
    if pct is not None:
        checks.expect(
            "optimizer.primary_percent",
            0.0 < pct < 100.0,
            file,
            f"{file}: primary optimizer percentage {pct:.3f}% (median window optimizer ms / baseline update ms)",
            percent=pct,
        )


def check_recorded_accounting(record: AttemptRecord, checks: Checks) -> None:
    """The accounting the controller recorded in the receipt agrees with the outcome."""
    a = record.attempt
    r = a.receipt
    if r is None or r.accounting is None or a.result is None or not r.accounting_final:
        return
    k = kind(a.result)
    row = r.accounting
    file = record.file(RECEIPT)
    checks.expect(
        "receipt.state",
        slurm.state_explains(k, row, a.result.finished_at),
        file,
        f"{file}: recorded accounting state {row.state} exit {row.exit_code} for job {r.job_id}; "
        f"result.json outcome {k} implies {slurm.expected_states(k)}",
        state=row.state,
        exit_code=row.exit_code,
        outcome=k,
    )


# ---------------------------------------------------------------------------- summary


def check_summary(root: Path, checks: Checks, curves: list[CurveFinding], loaded: Loaded, is_opt: bool) -> None:
    """Compare the curves `collect` reported (results.json) with the audit's own derivation."""
    path = root / RESULTS_JSON
    if not path.is_file():
        checks.not_applicable("summary", f"{RESULTS_JSON}: not written yet (run collect); curve summaries not compared")
        return
    try:
        raw = msgspec.json.decode(path.read_bytes())
    except msgspec.DecodeError as exc:
        checks.fail("summary", RESULTS_JSON, f"{RESULTS_JSON}: not valid JSON ({exc})")
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
        if s.get("first_oom_batch") is not None and c.first_oom_batch is None:
            b = s.get("first_oom_batch")
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
    from throughput_audit.campaign import final_attempts, status

    r = final_attempts(records).get(batch)
    return "nothing (no attempt)" if r is None else f"{status(r, optimizer=False)} ({r.rel})"


def _fastest_stable(records: list[AttemptRecord], curve: CurveFinding, is_opt: bool) -> tuple[int, float] | None:
    from throughput_audit.campaign import final_attempts

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


# ---------------------------------------------------------------------------- slurm


def check_slurm(loaded: Loaded, checks: Checks, *, runner: slurm.Runner | None, settle_seconds: float) -> str:
    m = loaded.manifest
    profile = m.profile
    jobs: dict[str, AttemptRecord] = {}
    for r in loaded.attempts:
        rec = r.attempt.receipt
        if rec is None:
            continue
        file = r.file(RECEIPT)
        if rec.scheduler != "slurm":
            checks.fail("slurm.receipt", file, f"{file}: scheduler {rec.scheduler} in a Slurm campaign")
            continue
        if rec.job_id in jobs:
            checks.fail(
                "slurm.duplicate_job",
                file,
                f"{file}: job {rec.job_id} is also the receipt of {jobs[rec.job_id].file(RECEIPT)}",
                job_id=rec.job_id,
            )
            continue
        jobs[rec.job_id] = r
    try:
        rows, queries = slurm.query(jobs, runner=runner)
        rows, more = _settle(rows, runner, settle_seconds)
    except slurm.AccountingUnavailable as exc:
        checks.fail("slurm.sacct", "", f"sacct: {exc}")
        return f"# sacct failed: {exc}\n"
    checks.expect(
        "slurm.queries",
        len(queries) == -(-len(jobs) // slurm.BATCH),
        "",
        f"{len(jobs)} jobs read with {len(queries)} batched sacct queries ({len(more)} more re-reading lagging rows)",
        jobs=len(jobs),
        queries=len(queries),
        rereads=len(more),
    )
    queries = queries + more
    used: list[AccountingRow] = []
    for job_id, r in sorted(jobs.items(), key=lambda kv: slurm._job_sort_key(kv[0])):
        file = r.file(RECEIPT)
        row = rows.get(job_id)
        if row is None:
            checks.fail("slurm.accounted", file, f"{file}: job {job_id} is missing from Slurm accounting", job_id=job_id)
            continue
        used.append(row)
        checks.expect("slurm.accounted", True, file, f"{file}: job {job_id} found in accounting", job_id=job_id)
        token = r.attempt.intent.token if r.attempt.intent else r.attempt.receipt.token
        checks.expect(
            "slurm.identity",
            token in (row.job_name, row.comment) or token in row.job_name,
            file,
            f"{file}: job {job_id} is named {row.job_name!r} with comment {row.comment!r}; the intent's token is {token!r}",
            job_id=job_id,
            job_name=row.job_name,
            comment=row.comment,
            token=token,
        )
        problems = slurm.allocation_problems(row, profile)
        checks.expect(
            "slurm.allocation",
            not problems,
            file,
            f"{file}: job {job_id} "
            + (
                "; ".join(f"{what} {actual!r}, profile requires {expected!r}" for what, expected, actual in problems)
                if problems
                else f"AllocTRES {row.alloc_tres}, Timelimit {row.timelimit}, account {row.account}, partition {row.partition}"
            ),
            job_id=job_id,
            alloc_tres=row.alloc_tres,
            timelimit=row.timelimit,
            account=row.account,
            partition=row.partition,
            problems={what: {"expected": e, "actual": a} for what, e, a in problems},
        )
        res = r.attempt.result
        if res is not None:
            k = kind(res)
            checks.expect(
                "slurm.state",
                slurm.state_explains(k, row, res.finished_at),
                file,
                f"{file}: job {job_id} ended {row.state} exit {row.exit_code}; result.json outcome {k} "
                f"implies {slurm.expected_states(k)}",
                job_id=job_id,
                state=row.state,
                exit_code=row.exit_code,
                outcome=k,
            )
        recorded = r.attempt.receipt.accounting
        if recorded is not None and r.attempt.receipt.accounting_final:
            same = (recorded.state.split()[:1], recorded.exit_code) == (row.state.split()[:1], row.exit_code)
            checks.expect(
                "slurm.receipt_accounting",
                same,
                file,
                f"{file}: recorded final accounting {recorded.state} exit {recorded.exit_code}, "
                f"sacct now says {row.state} exit {row.exit_code} for job {job_id}",
                job_id=job_id,
            )
    peak = slurm.peak_concurrency(used)
    checks.expect(
        "slurm.peak_concurrency",
        peak.jobs <= profile.max_concurrent_jobs,
        ACCOUNTING,
        f"peak {peak.jobs} jobs running at once"
        + (f" at {peak.at.isoformat()} ({', '.join(peak.job_ids)})" if peak.at else "")
        + f"; the campaign's limit is {profile.max_concurrent_jobs}",
        peak=peak.jobs,
        limit=profile.max_concurrent_jobs,
        at=peak.at.isoformat() if peak.at else None,
        job_ids=peak.job_ids,
    )
    text = [f"# {m.name}: {len(jobs)} jobs, {len(queries)} sacct queries"]
    for q in queries:
        text.append("# " + " ".join(q.argv))
    return "\n".join(text) + "\n" + slurm.format_rows(used)


def _incomplete(row: AccountingRow) -> bool:
    return row.job_name in ("", "allocation") or not row.partition or not row.timelimit or not row.alloc_tres


def check_local_concurrency(loaded: Loaded, checks: Checks) -> str:
    """Local campaigns: peak concurrency from the executor's recorded start/end times."""
    rows = [r.attempt.receipt.accounting for r in loaded.attempts if r.attempt.receipt and r.attempt.receipt.accounting]
    if not rows:
        return ""
    limit = loaded.manifest.profile.max_concurrent_jobs
    peak = slurm.peak_concurrency(rows)
    checks.expect(
        "local.peak_concurrency",
        peak.jobs <= limit,
        ACCOUNTING,
        f"peak {peak.jobs} local jobs running at once (recorded in receipts)"
        + (f" at {peak.at.isoformat()} ({', '.join(peak.job_ids)})" if peak.at else "")
        + f"; the campaign's limit is {limit}",
        peak=peak.jobs,
        limit=limit,
        job_ids=peak.job_ids,
    )
    return "# local executor accounting recorded in receipts\n" + slurm.format_rows(rows)


def _settle(rows: dict[str, AccountingRow], runner, settle_seconds: float):
    """sacct lags a few seconds after a job ends; re-read rows that are not filled in yet."""
    queries = []
    deadline = time.monotonic() + settle_seconds
    while True:
        lagging = [j for j, row in rows.items() if _incomplete(row)]
        if not lagging or time.monotonic() >= deadline:
            return rows, queries
        time.sleep(1.0)
        fresh, more = slurm.query(lagging, runner=runner)
        queries += more
        rows = {**rows, **fresh}
