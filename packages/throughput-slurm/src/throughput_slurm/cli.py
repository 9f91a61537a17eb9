"""`throughput-slurm`: how the tool asks Slurm and reads its answers, to check them by hand
on a site.

throughput-slurm format                   # the --format argument the tool gives sacct
sacct --parsable2 --noheader -X --format=$(throughput-slurm format) -j 123 | throughput-slurm read
throughput-slurm environment              # what this shell's Slurm commands would run without
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from throughput_schema.argparsing import OneLineParser, command_line
from throughput_slurm.environment import slurm_environment
from throughput_slurm.sacct import FORMAT, job_accounting, parse_rows


@command_line
def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="throughput-slurm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("format", help="print the --format argument the tool gives sacct")
    read = sub.add_parser("read", help="read sacct's rows (that --format) as the tool does: one JSON line a row")
    read.add_argument("file", nargs="?", type=Path, help="a file of sacct's output (default: standard input)")
    sub.add_parser("environment", help="name the variables of this shell that the tool's Slurm commands run without")
    args = parser.parse_args(argv)

    if args.command == "format":
        print(FORMAT)
        return 0
    if args.command == "environment":
        return _environment()
    source = args.file or "standard input"
    try:
        text = args.file.read_text() if args.file else sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"throughput-slurm: cannot read {source}: {exc}; give a text file of sacct's output", file=sys.stderr)
        return 2
    rows = parse_rows(text)
    if not rows:
        print(
            f"throughput-slurm: no sacct row in {source}; run sacct with --parsable2 "
            "--noheader -X --format=$(throughput-slurm format)",
            file=sys.stderr,
        )
        return 1
    for row in rows:
        sys.stdout.buffer.write(msgspec.json.encode(job_accounting(row)) + b"\n")
    return 0


def _environment() -> int:
    _, removed = slurm_environment(os.environ)
    if not removed:
        print("nothing: the tool's Slurm commands run in this shell's environment (with SLURM_TIME_FORMAT=standard)")
        return 0
    # Names only: a value may be a secret, and the manifest records them for the campaign.
    print("the tool's Slurm commands run without: " + " ".join(removed))
    return 0
