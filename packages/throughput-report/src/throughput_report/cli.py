"""The throughput-report command line."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("throughput-report: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
