"""The jobs' Slurm accounting against the receipts, the results and the cluster profile,
and the converse: no job named by the campaign's tokens lacks a receipt; accounting.txt's
text. (Local campaigns: `local_registry`.)"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from throughput_audit import clock_skew, query_windows, slurm
from throughput_audit.allocation import allocation_problems
from throughput_audit.campaign import AttemptRecord, Loaded, kind
from throughput_audit.energy import check_job_energy
from throughput_audit.findings import Checks
from throughput_audit.job_states import job_order
from throughput_audit.jobs import Source, check_job, check_peak, check_worker_times_ran
from throughput_schema.layout import INTENT, RECEIPT
from throughput_slurm.sacct import AccountingRow, job_accounting

SACCT = Source("slurm", "sacct", skip="audit with --no-slurm to skip the Slurm checks")


def check_slurm(
    loaded: Loaded,
    checks: Checks,
    *,
    runner: slurm.Runner | None,
    settle_seconds: float,
    sacct_window: timedelta = query_windows.DEFAULT_SPAN,
) -> tuple[str, bool]:
    """accounting.txt's text, and whether Slurm's accounting answered."""
    jobs = _receipted_jobs(loaded, checks)
    try:
        rows, queries = slurm.query(jobs, runner=runner)
        rows, more = _settle(rows, runner, settle_seconds)
    except slurm.AccountingUnavailable as exc:
        unavailable(checks, exc)
        return f"# Slurm accounting not available: {exc}\n", False
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
    used = _check_jobs(loaded, jobs, rows, checks)
    unreceipted: list[AccountingRow] = []
    failed = ""
    try:
        unreceipted, by_token = check_unreceipted(loaded, checks, runner=runner, span=sacct_window)
        queries = queries + by_token
    except slurm.AccountingUnavailable as exc:
        unavailable(checks, exc)
        failed = f"# sacct by token failed: {exc}"
    text = [f"# {loaded.manifest.name}: {len(jobs)} jobs, {len(queries)} sacct queries"]
    for q in queries:
        text.append("# " + " ".join(q.argv))
    if failed:
        text.append(failed)
    if unreceipted:
        text.append(f"# {len(unreceipted)} jobs named by the campaign's tokens without a receipt (listed last)")
    return "\n".join(text) + "\n" + slurm.format_rows(used + unreceipted), not failed


def _receipted_jobs(loaded: Loaded, checks: Checks) -> dict[str, AttemptRecord]:
    """Each Slurm receipt's attempt by job id; a receipt of another scheduler or a job id
    already receipted fails its check and is left out."""
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
    return jobs


def _check_jobs(
    loaded: Loaded, jobs: dict[str, AttemptRecord], rows: dict[str, AccountingRow], checks: Checks
) -> list[AccountingRow]:
    """Every receipted job against its sacct row: accounted, allocated as the profile asks, its
    times and energy; then the campaign's concurrency. The rows found, in job order."""
    profile = loaded.manifest.profile
    used: list[AccountingRow] = []
    compared = 0
    read = {job_id: job_accounting(row) for job_id, row in rows.items()}
    skews = clock_skew.measure(SACCT, [(r, read[j]) for j, r in jobs.items() if j in read], checks)
    for job_id, r in sorted(jobs.items(), key=lambda kv: job_order(kv[0])):
        file = r.file(RECEIPT)
        row = rows.get(job_id)
        if row is None:
            checks.fail(
                "slurm.accounted", file, f"{file}: job {job_id} is missing from Slurm accounting", job_id=job_id
            )
            continue
        used.append(row)
        checks.expect("slurm.accounted", True, file, f"{file}: job {job_id} found in accounting", job_id=job_id)
        _check_allocation(r, job_id, row, profile, checks)
        skew = skews.get(clock_skew.node_of(r, read[job_id]), 0.0)
        names = {"name": row.job_name, "comment": row.comment}
        compared += check_job(SACCT, r, read[job_id], checks, names=names, skew=skew)
        check_job_energy(r, row, checks)
    check_worker_times_ran(SACCT, len(used), compared, checks)
    check_peak(SACCT, [read[row.job_id] for row in used], profile.max_concurrent_jobs, checks)
    return used


def _check_allocation(r: AttemptRecord, job_id: str, row: AccountingRow, profile, checks: Checks) -> None:
    file = r.file(RECEIPT)
    problems = allocation_problems(row, profile)
    if kind(r.attempt.result) == "refused" and not row.alloc_tres:
        problems = []  # cancelled while pending for a reason that never clears: no allocation to check
    checks.expect(
        "slurm.allocation",
        not problems,
        file,
        f"{file}: job {job_id} "
        + (
            "; ".join(f"{what} {actual!r}, profile requires {expected}" for what, expected, actual in problems)
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


def unavailable(checks: Checks, exc: Exception) -> None:
    checks.fail(
        "slurm.sacct",
        "",
        f"Slurm accounting not available: {exc}; the jobs were not checked against it "
        "(fix sacct/slurmdbd and audit again, or pass --no-slurm to skip the Slurm checks)",
        error=str(exc),
    )


def check_unreceipted(
    loaded: Loaded, checks: Checks, *, runner: slurm.Runner | None, span: timedelta = query_windows.DEFAULT_SPAN
) -> tuple[list[AccountingRow], list[slurm.Query]]:
    """Every job sacct holds under one of the campaign's intent tokens has a receipt: a
    second submission of one intent, or a job left by a controller that died between sbatch
    and the receipt and never adopted it, used the allocation and may have written figures.
    Each token is looked for around its intent's time, in windows no wider than `span`
    (slurmdbd's MaxQueryTimeRange refuses wider ones). Returns those jobs' rows and the queries."""
    owners: dict[str, AttemptRecord] = {}
    for r in loaded.attempts:
        for rec in (r.attempt.intent, r.attempt.receipt):
            if rec is not None:
                owners.setdefault(rec.token, r)
    receipted = {r.attempt.receipt.job_id for r in loaded.attempts if r.attempt.receipt is not None}
    times: dict[str, tuple[datetime, datetime]] = {}
    unreadable = 0
    for token, r in owners.items():
        # When the intent was written, the job was submitted; a receipt without an intent
        # (a finding of its own) says when it was written instead.
        intent = r.attempt.intent
        if intent is not None:
            file, field, when = r.file(INTENT), "created_at", intent.created_at
        else:
            receipt = r.attempt.receipt
            assert receipt is not None, "a token is owned through the attempt's intent or its receipt"
            file, field, when = r.file(RECEIPT), "submitted_at", receipt.submitted_at
        try:
            times[token] = query_windows.around(when)
        except ValueError:
            unreadable += 1
            checks.fail(
                "slurm.unreceipted",
                file,
                f"{file}: {field} {when!r} is not a time; jobs under its token cannot be looked up",
            )
    rows, queries, windows = slurm.query_tokens(times, span, runner=runner)
    orphans = sorted(
        (row for job_id, row in rows.items() if job_id not in receipted), key=lambda row: job_order(row.job_id)
    )
    for row in orphans:
        r = owners[row.job_name]
        file = r.file(INTENT)
        rec = r.attempt.receipt
        if rec is not None:
            whose = f"the attempt's receipt names job {rec.job_id}"
        elif r.settlement:
            whose = f"the attempt has no receipt and was settled as {r.settlement}"
        else:
            whose = "the attempt has no receipt"
        checks.fail(
            "slurm.unreceipted",
            file,
            f"{file}: job {row.job_id} ({row.job_name}) was submitted without a receipt in the campaign "
            f"(sacct: {row.state or 'no state'}, start {row.start or 'none'}); {whose}",
            job_id=row.job_id,
            token=row.job_name,
            state=row.state,
            attempt=r.rel,
        )
    if not times:
        if not unreadable:
            checks.not_applicable(
                "slurm.unreceipted", "no intents: no job can have been submitted under the campaign's tokens"
            )
    elif not orphans and not unreadable:
        checks.expect(
            "slurm.unreceipted",
            True,
            "",
            f"sacct holds {len(rows)} jobs named by the campaign's {len(times)} tokens, asked in {len(windows)} windows "
            f"of at most {query_windows.span_text(span)} around the intents' times, with {len(queries)} sacct calls "
            f"({windows[0].start.isoformat()} to {windows[-1].end.isoformat()}); each has a receipt",
            jobs=len(rows),
            tokens=len(times),
            windows=len(windows),
            queries=len(queries),
            span_seconds=int(span.total_seconds()),
        )
    return orphans, queries


def _incomplete(row: AccountingRow) -> bool:
    return row.job_name in ("", "allocation") or not row.partition or not row.timelimit or not row.alloc_tres


def _settle(rows: dict[str, AccountingRow], runner, settle_seconds: float):
    """sacct lags a few seconds after a job ends; re-read rows that are not filled in yet."""
    queries: list[slurm.Query] = []
    deadline = time.monotonic() + settle_seconds
    while True:
        lagging = [j for j, row in rows.items() if _incomplete(row)]
        if not lagging or time.monotonic() >= deadline:
            return rows, queries
        time.sleep(1.0)
        fresh, more = slurm.query(lagging, runner=runner)
        queries += more
        rows = {**rows, **fresh}
