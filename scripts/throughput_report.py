#!/usr/bin/env python3
"""Driver: `python scripts/throughput_report.py ...` runs `throughput_report.cli.main` (frozen into campaigns)."""

import sys

from throughput_report.cli import main

if __name__ == "__main__":
    sys.exit(main())
