#!/usr/bin/env python3
"""Driver: `python scripts/throughput_sweep.py ...` runs `throughput_sweep.cli.main` (frozen into campaigns)."""

import os
import sys

# This file shares its name with the package: keep its own folder off the import path.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

from throughput_sweep.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
