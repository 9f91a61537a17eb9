"""The argument parser every command line of the project uses.

A usage error is one line on stderr and exit status 2, like every other message the
tools print for bad input: no usage block for a user to read through.
"""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)
