"""The throughput-report command line.

    throughput-report --throughput A [B ...] --optimizer C [D ...] --output OUT [--carbon-intensity G]

Exit status: 0 report written; 1 an independent check failed; 2 the inputs or the
output directory were refused (one line naming the campaigns; nothing written).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from throughput_report.checks import CheckFailed
from throughput_report.inputs import Refused
from throughput_schema.argparsing import OneLineParser, command_line, positive_float, positive_int
from throughput_schema.codec import SchemaError
from throughput_schema.provenance import ALLOW_TEST_WORKER


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="throughput-report",
        description="Combine throughput campaigns with their optimizer-timing follow-ups into a six-page PDF, "
        "figures, joined data and training-time projections at 20 tokens per parameter.",
    )
    p.add_argument(
        "--throughput",
        nargs="+",
        type=Path,
        required=True,
        metavar="CAMPAIGN",
        help="throughput campaigns, paired by order with --optimizer",
    )
    p.add_argument(
        "--optimizer",
        nargs="+",
        type=Path,
        required=True,
        metavar="CAMPAIGN",
        help="optimizer-timing campaigns, the n-th measured from the n-th --throughput campaign",
    )
    p.add_argument(
        "--output",
        type=Path,
        required=True,
        metavar="OUT",
        help="a new directory for the report (an existing report is never overwritten)",
    )
    p.add_argument(
        "--tokens-per-update",
        type=positive_int,
        default=None,
        metavar="N",
        help="B·L for the context comparison (default: the largest available on every curve)",
    )
    p.add_argument(
        "--carbon-intensity",
        type=positive_float,
        default=None,
        metavar="G",
        help="your grid's carbon intensity in gCO2e/kWh: adds the emissions of the projected runs' measured "
        "energy (none without it)",
    )
    p.add_argument(
        ALLOW_TEST_WORKER,
        action="store_true",
        help="report campaigns run with a test worker (not tiny_llm), under a banner on every page and file",
    )
    return p


@command_line
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from throughput_report.report import build_report  # matplotlib loads only for a real run

    started = time.monotonic()
    try:
        built = build_report(
            args.throughput,
            args.optimizer,
            args.output,
            tokens_per_update=args.tokens_per_update,
            allow_test_worker=args.allow_test_worker,
            carbon_intensity=args.carbon_intensity,
        )
    except (Refused, SchemaError) as exc:
        print(f"throughput-report: refused: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"throughput-report: {exc}; no report written", file=sys.stderr)
        return 1
    seconds = time.monotonic() - started
    proj = built.projection
    if built.banner:
        print(built.banner)
    print(
        f"wrote {built.out}: report.pdf (6 pages), 5 figures (PDF, SVG, 450-dpi PNG), points.csv, points.json, "
        f"inputs.sha256 - {len(proj.curves)} curves, {len(proj.points)} points, "
        f"{sum(built.checks.values()):,} checks passed, {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
