#!/usr/bin/env python3
"""Driver: `python scripts/throughput_audit.py ...` runs `throughput_audit.cli.main` (frozen into campaigns)."""

import sys

from throughput_audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
