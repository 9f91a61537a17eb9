"""The throughput-compare command line: `throughput-compare A B --output OUT`."""

from __future__ import annotations

import sys
from pathlib import Path

from throughput_compare.allowed import ALLOWABLE
from throughput_compare.precision import precision_line
from throughput_schema.argparsing import OneLineParser, command_line
from throughput_schema.provenance import ALLOW_TEST_WORKER, PRODUCTION_WORKER

PROG = "throughput-compare"


@command_line
def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="Compare two audited campaigns of the same kind point by point: the ratio B/A of tokens/s "
        "with its uncertainty and a verdict against a stated noise threshold, moved memory boundaries, "
        "changed fastest batches, a batch recommendation per curve, and every difference between them.",
    )
    parser.add_argument("a", type=Path, help="campaign A, the reference (runs/NAME, audited)")
    parser.add_argument("b", type=Path, help="campaign B, compared against A (audited)")
    parser.add_argument("--output", required=True, type=Path, help="a new or empty folder for the comparison")
    parser.add_argument(
        "--allow-protocol-change",
        action="store_true",
        help="compare even when the measurement protocol or a recipe differs (the differences are listed)",
    )
    parser.add_argument(
        "--allow-difference",
        action="append",
        choices=sorted(ALLOWABLE),
        default=[],
        metavar="NAME",
        help="compare even though the campaigns differ in this, and say so at the top (repeatable; "
        f"{', '.join(sorted(ALLOWABLE))}: the optimizer and its settings, e.g. AdamW against Muon)",
    )
    parser.add_argument(
        ALLOW_TEST_WORKER,
        action="store_true",
        help=f"compare campaigns run with a test worker (not {PRODUCTION_WORKER}), under a banner on every page and file",
    )
    args = parser.parse_args(argv)

    from throughput_compare.compare import compare
    from throughput_compare.inputs import Refused, load
    from throughput_compare.output import publish, refuse_output

    try:
        refuse_output(args.output, [args.a, args.b])
        comparison = compare(
            load(args.a, "A"),
            load(args.b, "B"),
            allow_protocol_change=args.allow_protocol_change,
            allow_test_worker=args.allow_test_worker,
            allow_differences=args.allow_difference,
        )
        files = publish(args.output, comparison)
    except Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"{PROG}: cannot write {args.output}: {exc.strerror or exc}; choose a writable output folder",
            file=sys.stderr,
        )
        return 2
    banner = [comparison.test_worker] if comparison.test_worker else []
    print(
        "\n".join(
            [
                *banner,
                *filter(None, [precision_line(comparison)]),
                *comparison.accepted,
                comparison.summary,
                f"wrote {len(files)} files to {args.output}",
                *banner,
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
