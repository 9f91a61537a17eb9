"""The recipe options every `python -m tiny_llm` command takes: a preset and `--set` overrides."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_recipe_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=required,
        help="a preset such as configs/250m.yaml, or a Hugging Face model's config.json",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one recipe value (repeatable), e.g. model.context_length=2048",
    )
