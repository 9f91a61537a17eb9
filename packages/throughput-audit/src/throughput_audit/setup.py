"""The setup checks: a result's phases add up to its setup, and a job's workers spent no more
than the scheduler says the job ran.

A worker that under-reports its setup (the GPU time a campaign spends compiling) would make
a campaign look cheaper than it was; the phases are what `status` and collect's README add
up as the campaign's setup share, so they must be the setup's own seconds.
"""

from __future__ import annotations

from throughput_audit.campaign import AttemptRecord
from throughput_audit.findings import Checks
from throughput_schema import WorkerResult, outcome_kind
from throughput_schema.layout import RECEIPT


def check_setup(checks: Checks, file: str, result: WorkerResult) -> None:
    if outcome_kind(result.outcome) != "ok" or result.setup_seconds is None:
        return  # a failed point's setup may have ended anywhere
    phases = result.setup_phases
    if not phases:
        checks.not_applicable("setup.phases", f"{file}: the worker recorded no split of its setup", file)
    else:
        total = sum(phases.values())
        checks.expect(
            "setup.phases",
            abs(total - result.setup_seconds) <= 1e-6 * max(1.0, result.setup_seconds),
            file,
            f"{file}: setup phases add up to {total:.3f} s, setup {result.setup_seconds:.3f} s",
            phases=phases,
            setup_seconds=result.setup_seconds,
        )


# The scheduler counts whole seconds (Slurm's Elapsed truncates both ends).
_ELAPSED_RESOLUTION_SECONDS = 1.0


def check_setup_inside_run(checks: Checks, record: AttemptRecord, *, modelled: bool) -> None:
    """A job's workers cannot have spent more than the scheduler says the job ran: each one's
    startup, setup, calibration and windows, one after another, lie inside its elapsed time.
    `modelled`: the campaign's worker is a test worker whose windows are modelled, not timed."""
    receipt = record.attempt.receipt
    results = [r for r in (record.attempt.baseline, record.attempt.result) if r is not None]
    acc = receipt.accounting if receipt is not None and receipt.accounting_final else None
    if acc is None or acc.elapsed_seconds is None or not results:
        return
    file = record.file(RECEIPT)
    if modelled:
        checks.not_applicable("setup.inside_run", f"{file}: a test worker's windows are modelled, not timed", file)
        return
    parts = {
        "startup": sum(r.startup_seconds or 0.0 for r in results),
        "setup": sum(r.setup_seconds or 0.0 for r in results),
        "calibration": sum(r.calibration.seconds for r in results if r.calibration is not None),
        "windows": sum(w.seconds for r in results for w in r.windows),
    }
    spent = sum(parts.values())
    checks.expect(
        "setup.inside_run",
        spent <= acc.elapsed_seconds + _ELAPSED_RESOLUTION_SECONDS,
        file,
        f"{file}: the workers' startup, setup, calibration and windows ({spent:.1f} s: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items())
        + f") {'fit' if spent <= acc.elapsed_seconds + _ELAPSED_RESOLUTION_SECONDS else 'exceed'} job {acc.job_id}'s elapsed "
        f"{acc.elapsed_seconds:.0f} s",
        spent_seconds=spent,
        elapsed_seconds=acc.elapsed_seconds,
    )
