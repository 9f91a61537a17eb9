"""The audit: load a campaign, run every check, write audit.json and accounting.txt.

`run_audit` is the library entry point (the command line is a thin wrapper); its
`runner` argument replaces the sacct subprocess in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from throughput_audit import __version__, energy, job_states, optimizer, provenance, query_windows, slurm, spot_check
from throughput_audit.accounting_readers import READERS, AccountingOptions
from throughput_audit.baseline import baseline_matches
from throughput_audit.campaign import (
    AttemptRecord,
    Loaded,
    check_attempt_files,
    check_frozen,
    frozen_recipe,
    kind,
    load,
)
from throughput_audit.curves import check_curve_set, check_retries, group, walk_throughput
from throughput_audit.findings import Checks
from throughput_audit.optimizer_split import check_optimizer
from throughput_audit.points import check_point_recipe, check_throughput
from throughput_audit.precision import check_precision
from throughput_audit.published import check_published_accounting
from throughput_audit.setup import check_setup, check_setup_inside_run
from throughput_audit.setup_cache import check_cache
from throughput_audit.summary import check_summary
from throughput_schema import SchemaError, write_atomic
from throughput_schema.audit import AUDIT_VERSION, AuditReport, CurveFinding
from throughput_schema.layout import ACCOUNTING, AUDIT, BASELINE, FROZEN, MANIFEST, RECEIPT, RECIPES, RESULT
from throughput_schema.provenance import is_test_worker


class NotACampaign(Exception):
    """The folder is not a campaign, or its manifest cannot be read; one line."""


@dataclass
class AuditRun:
    report: AuditReport
    accounting: str


def run_audit(
    root: Path,
    *,
    runner: slurm.Runner | None = None,
    slurm_checks: bool = True,
    compiled_checks: bool = True,
    settle_seconds: float = 15.0,
    allow_test_worker: bool = False,
    sacct_window: timedelta = query_windows.DEFAULT_SPAN,
) -> AuditRun:
    root = Path(root)
    if not root.is_dir():
        raise NotACampaign(f"{root}: no such campaign folder")
    if not (root / MANIFEST).is_file():
        raise NotACampaign(f"{root}: not a campaign (no {MANIFEST})")
    checks = Checks()
    try:
        from throughput_schema.layout import load_manifest

        manifest = load_manifest(root)
    except SchemaError as exc:
        raise NotACampaign(str(exc)) from None
    read_accounting = READERS.get(manifest.profile.scheduler)
    is_opt = manifest.kind == "optimizer-timing"
    loaded = load(root, checks, optimizer=is_opt)

    check_frozen(loaded, checks)
    test_worker = provenance.check_worker(loaded, checks, allow_test_worker=allow_test_worker)
    check_curve_set(loaded, checks)
    recipes = {m: frozen_recipe(loaded, m, checks) for m in manifest.models}
    for record in loaded.attempts:
        check_attempt_files(loaded, record, checks)
        check_result(loaded, record, checks, recipes, is_opt, artifacts=compiled_checks)
        check_recorded_accounting(record, checks)
        check_setup_inside_run(checks, record, modelled=is_test_worker(manifest.worker))

    groups = group(loaded)
    curves: list[CurveFinding]
    if manifest.spot_check is not None:
        curves = spot_check.check_sample(loaded, checks, root)
        for name, records in sorted(groups.items()):
            check_retries(name, records, checks)
        spot_check.check_comparison(loaded, checks, root)
    elif is_opt:
        parent = optimizer.parent_fitting(root, manifest, checks)
        curves = optimizer.check_grid(loaded, checks, parent)
        for name, records in sorted(groups.items()):
            check_retries(name, records, checks)
    else:
        curves = []
        for name in manifest.curves():
            records = groups.get(name, [])
            check_retries(name, records, checks)
            curves.append(walk_throughput(name, records, manifest, checks, root))
    check_summary(root, checks, curves, loaded, is_opt)
    check_published_accounting(root, loaded, checks)

    options = AccountingOptions(runner, slurm_checks, settle_seconds, sacct_window)
    read = read_accounting(loaded, checks, options)
    accounting = read.text

    notes = provenance.notes(loaded, test_worker)
    if test_worker:
        accounting = f"# {notes[0]}\n{accounting}"
    report = AuditReport(
        audit_version=AUDIT_VERSION,
        campaign=str(root),
        name=manifest.name,
        kind=manifest.kind,
        audited_at=datetime.now(UTC).isoformat(timespec="seconds"),
        tool_version=__version__,
        scheduler_accounting=read.scheduler_accounting,
        summary=checks.summary(),
        curves=curves,
        checks=checks.items,
        test_worker=test_worker,
        notes=notes,
    )
    return AuditRun(report=report, accounting=accounting)


def write_outputs(root: Path, outcome: AuditRun) -> None:
    data = msgspec.json.format(msgspec.json.encode(outcome.report), indent=2) + b"\n"
    write_atomic(Path(root) / AUDIT, data)
    write_atomic(Path(root) / ACCOUNTING, outcome.accounting)


# ---------------------------------------------------------------------------- results


def check_result(
    loaded: Loaded, record: AttemptRecord, checks: Checks, recipes, is_opt: bool, *, artifacts: bool = True
) -> None:
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
        f"{file}: result protocol "
        + ("equals" if res.protocol == m.protocol else f"{res.protocol} differs from")
        + " the manifest's",
    )
    check_precision(checks, file, res, m.protocol)
    check_optimizer(checks, file, res, m.protocol)
    check_setup(checks, file, res)
    check_cache(checks, loaded.root, m, file, res, artifacts=artifacts)
    if a.baseline is not None:
        check_cache(checks, loaded.root, m, record.file(BASELINE), a.baseline, artifacts=artifacts)
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
    energy.check_energy(checks, file, res, batch=a.batch_size, context=a.context_length)
    if not is_opt:
        check_throughput(checks, file, res, batch=a.batch_size, context=a.context_length, protocol=m.protocol)
        return
    # The instrumented worker: five more windows when throughput or optimizer CV exceeded the threshold.
    by_opt = optimizer.optimizer_first_cv_exceeded(record, m.protocol)
    check_throughput(
        checks,
        file,
        res,
        batch=a.batch_size,
        context=a.context_length,
        protocol=m.protocol,
        extended_by_optimizer=by_opt,
    )
    baseline_matches(record, checks)
    if a.baseline is not None and kind(a.baseline) == "ok":
        bfile = record.file(BASELINE)
        check_throughput(checks, bfile, a.baseline, batch=a.batch_size, context=a.context_length, protocol=m.protocol)
        energy.check_energy(checks, bfile, a.baseline, batch=a.batch_size, context=a.context_length)
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
    """The accounting the controller recorded in the receipt has readable times (a campaign
    run with SLURM_TIME_FORMAT=relative stored "19:19:41") and agrees with the outcome, in
    the project's words whatever the scheduler."""
    a = record.attempt
    r = a.receipt
    if r is None or r.accounting is None:
        return
    file = record.file(RECEIPT)
    bad = job_states.time_problems(r.accounting)
    checks.expect(
        "receipt.times",
        not bad,
        file,
        f"{file}: the recorded accounting's "
        + "; ".join(bad)
        + " (times stored by a campaign run with SLURM_TIME_FORMAT "
        "set; the job's times cannot be read from this receipt)"
        if bad
        else f"{file}: recorded start {r.accounting.start!r} and end {r.accounting.end!r} are dates and times",
        start=r.accounting.start,
        end=r.accounting.end,
    )
    if a.result is None or not r.accounting_final:
        return
    k = kind(a.result)
    row = r.accounting
    checks.expect(
        "receipt.state",
        job_states.state_explains(k, row, a.result.finished_at),
        file,
        f"{file}: recorded accounting state {row.state} exit {row.exit_code} for job {r.job_id}; "
        f"result.json outcome {k} implies {job_states.expected_text(k)}",
        state=row.state,
        exit_code=row.exit_code,
        outcome=k,
    )
