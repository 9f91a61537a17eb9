"""`python -m tiny_llm COMMAND`: describe a recipe, run the throughput worker, or probe the CPU.

Each command (`describe` here, the worker in `worker_cli`) takes its parsed arguments and
returns an exit status. Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from throughput_schema import dumps, hf_config
from throughput_schema.argparsing import OneLineParser, command_line
from throughput_schema.recipe import RecipeError, flops_per_token, load_recipe, parameter_count
from tiny_llm import cpu_rate, worker_cli
from tiny_llm.recipe_args import add_recipe_args


def describe(args: argparse.Namespace) -> int:
    """Print the resolved recipe and its exact parameter count as JSON; no GPU, no torch.

    `--config` also takes a Hugging Face config.json; what its conversion decided (the
    transformers defaults it took, the context it did not use) is shown beside the recipe.
    """
    recipe = load_recipe(args.config, args.overrides)
    payload: dict[str, Any] = {
        "recipe": recipe,
        "parameters": parameter_count(recipe.model),
        "flops_per_token": flops_per_token(recipe.model),
        "tokens_per_update": recipe.training.batch_tokens,
    }
    # load_recipe has read the file without complaint; None: a recipe written as JSON.
    imported = hf_config.import_if_config(args.config) if args.config.suffix == ".json" else None
    if imported is not None:
        payload["converted_from"] = {
            "model_type": imported.model_type,
            "sha256": imported.sha256,
            "defaults_used": list(imported.defaults),
            "max_position_embeddings": imported.max_position_embeddings,
        }
    sys.stdout.buffer.write(dumps(payload))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m tiny_llm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("describe", help="print the resolved recipe and exact parameter count")
    add_recipe_args(p)
    p.set_defaults(func=describe)
    # The worker imports torch only when it runs, so registering it keeps `describe` light.
    worker_cli.register(sub)
    cpu_rate.register(sub)
    return parser


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
