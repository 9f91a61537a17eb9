#!/usr/bin/env python3
"""Driver: `python scripts/throughput_sweep.py ...` runs `throughput_sweep.cli.main` (frozen into campaigns)."""

import sys

from throughput_sweep.cli import main

if __name__ == "__main__":
    sys.exit(main())
