"""The throughput-audit command line."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("throughput-audit: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
