"""The throughput-audit command line: `throughput-audit --output runs/NAME`."""

from __future__ import annotations

import sys
from pathlib import Path

from throughput_audit.setup_cache import NO_COMPILED
from throughput_schema import SchemaError
from throughput_schema.argparsing import OneLineParser, command_line, storage_error
from throughput_schema.audit import AuditReport, Check
from throughput_schema.provenance import ALLOW_TEST_WORKER
from throughput_schema.scheduler_names import UnknownScheduler

SHOWN_FAILURES = 8


@command_line
def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="throughput-audit",
        description="Re-derive every figure of a throughput or optimizer-timing campaign from its raw files "
        "and check its jobs against Slurm accounting. Writes audit.json and accounting.txt into the campaign.",
    )
    parser.add_argument("--output", required=True, type=Path, help="the campaign folder (runs/NAME)")
    parser.add_argument("--no-slurm", action="store_true", help="skip the Slurm accounting checks")
    parser.add_argument(
        NO_COMPILED,
        action="store_true",
        help="skip the check of the compiled artifacts warm setups loaded (setup.cache), for a copy of a "
        "campaign that left them out",
    )
    parser.add_argument(
        "--sacct-window",
        default="1-00:00:00",
        metavar="D-HH:MM:SS",
        help="widest time window of one sacct query by job name (default 1-00:00:00); at most the site's "
        "MaxQueryTimeRange, which slurmdbd enforces for users who are not Slurm administrators",
    )
    parser.add_argument(
        ALLOW_TEST_WORKER,
        action="store_true",
        help="let a campaign run with a test worker (not tiny_llm) pass, under a banner on every output",
    )
    args = parser.parse_args(argv)

    from throughput_audit.accounting_readers import READERS
    from throughput_audit.audit import NotACampaign, run_audit, write_outputs
    from throughput_audit.query_windows import parse_span
    from throughput_schema.layout import AUDIT

    try:
        span = parse_span(args.sacct_window)
    except ValueError as exc:
        print(f"throughput-audit: {exc}", file=sys.stderr)
        return 2
    try:
        READERS.check()
        outcome = run_audit(
            args.output,
            slurm_checks=not args.no_slurm,
            compiled_checks=not args.no_compiled,
            allow_test_worker=args.allow_test_worker,
            sacct_window=span,
        )
    except NotACampaign as exc:
        print(f"throughput-audit: {exc}", file=sys.stderr)
        return 2
    except (SchemaError, UnknownScheduler) as exc:
        print(f"throughput-audit: {exc}", file=sys.stderr)
        return 2
    try:
        write_outputs(args.output, outcome)
    except OSError as exc:
        if storage_error(exc):
            raise  # command_line says it in its one line, with what to do
        print(f"throughput-audit: cannot write {AUDIT}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    failures = print_report(outcome.report, args.output)
    return 1 if failures else 0


def print_report(report: AuditReport, output: Path) -> list[Check]:
    """The audit's lines on the terminal; returns its failed checks."""
    from throughput_audit.energy import summary_line
    from throughput_schema.layout import ACCOUNTING, AUDIT

    s = report.summary
    states: dict[str, int] = {}
    for c in report.curves:
        states[c.state] = states.get(c.state, 0) + 1
    if report.test_worker:
        print(report.notes[0])
    print(
        f"{report.name} ({report.kind}): {s.passed} checks passed, {s.failed} failed, "
        f"{s.not_applicable} not applicable; the scheduler's accounting {report.scheduler_accounting.replace('_', ' ')}"
    )
    for note in report.notes[1 if report.test_worker else 0 :]:
        print(note)
    print(summary_line(report.checks))
    print("curves: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items())))
    for c in report.curves:
        if c.state == "blocked" and "--retry-failed" in c.blocked_reason:  # ended by someone else
            print(f"{c.curve} blocked: {c.blocked_reason}")
    failures = [c for c in report.checks if c.status == "fail"]
    for check in failures[:SHOWN_FAILURES]:
        print(f"FAIL {check.name}: {check.message}")
    if len(failures) > SHOWN_FAILURES:
        print(f"... and {len(failures) - SHOWN_FAILURES} more in {output / AUDIT}")
    print(f"wrote {output / AUDIT} and {output / ACCOUNTING}")
    if report.test_worker:
        print(report.notes[0])
    return failures


if __name__ == "__main__":
    sys.exit(main())
