"""The `benchmark-throughput-worker` subcommand (arrives with the worker)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    pass
