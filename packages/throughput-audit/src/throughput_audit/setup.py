"""The setup check of every result: its phases add up to its setup.

A worker that under-reports its setup (the GPU time a campaign spends compiling) would make
a campaign look cheaper than it was; the phases are what `status` and collect's README add
up as the campaign's setup share, so they must be the setup's own seconds.
"""

from __future__ import annotations

from throughput_audit.findings import Checks
from throughput_schema import WorkerResult, outcome_kind


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
