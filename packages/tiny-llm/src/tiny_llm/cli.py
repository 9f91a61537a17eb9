"""`python -m tiny_llm COMMAND`: describe a recipe, or run the throughput worker.

Commands register themselves in `COMMANDS`; each takes its parsed arguments and
returns an exit status. Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from throughput_schema import dumps
from throughput_schema.argparsing import OneLineParser, command_line
from throughput_schema.recipe import RecipeError, flops_per_token, load_recipe, parameter_count


def add_recipe_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--config", type=Path, required=required, help="a preset such as configs/250m.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one recipe value (repeatable), e.g. model.context_length=2048",
    )


def describe(args: argparse.Namespace) -> int:
    """Print the resolved recipe and its exact parameter count as JSON; no GPU, no torch."""
    recipe = load_recipe(args.config, args.overrides)
    payload = {
        "recipe": recipe,
        "parameters": parameter_count(recipe.model),
        "flops_per_token": flops_per_token(recipe.model),
        "tokens_per_update": recipe.training.batch_tokens,
    }
    sys.stdout.buffer.write(dumps(payload))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m tiny_llm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("describe", help="print the resolved recipe and exact parameter count")
    add_recipe_args(p)
    p.set_defaults(func=describe)
    for register in _command_modules():
        register(sub)
    return parser


def _command_modules():
    """Subcommands that need torch are registered lazily so `describe` stays light."""
    from tiny_llm import worker_cli

    return [worker_cli.register]


@command_line
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except RecipeError as exc:
        print(f"tiny_llm: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
