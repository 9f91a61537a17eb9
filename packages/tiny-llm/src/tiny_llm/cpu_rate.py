"""`python -m tiny_llm cpu-rate --config PRESET [--set ...]`: what this machine trains on,
and on a CPU the training FLOP/s that the preset's real update reaches there.

Prints one JSON object: `{"device": "cuda", "precision_refused": why or null}` where a GPU is
visible (why the recipe's FP8 precision cannot run there: torchao missing, no FP8 matrix
units), else
`{"device": "cpu", "threads": N, "backend": ..., "updates": K, "setup_updates": U,
"seconds_per_update": S, "flops_per_second": F}` (U: the updates the build runs before the
protocol's), F being the recipe's FLOPs per update over S. The controller scales
F to each model's FLOPs before it starts a campaign on the CPU (`throughput_sweep.cpu_estimate`):
a model too large for a CPU would otherwise sit on its first point for many minutes with
nothing to show. The update is the worker's own (`tiny_llm.update.build`), so the rate holds
everything an update does besides matrix products. On the CPU it is timed at BF16 whatever the
recipe's precision: the controller refuses FP8 there, having said what the CPU would do.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import msgspec

from throughput_schema.precision import GUIDE_PRECISION
from throughput_schema.recipe import flops_per_token, load_recipe
from tiny_llm.recipe_args import add_recipe_args

# Time at least this many updates for at least this long, after one untimed update.
MIN_UPDATES, MIN_SECONDS = 2, 0.5


def measure(recipe, threads: int) -> dict:
    import torch

    from tiny_llm.update import build

    if torch.cuda.is_available():
        from tiny_llm.fp8 import unavailable

        refusal = unavailable(recipe.training.precision, torch.device("cuda"))
        return {"device": "cuda", "precision_refused": str(refusal) if refusal else None}
    torch.set_num_threads(max(1, threads))
    bf16 = msgspec.structs.replace(recipe.training, precision=GUIDE_PRECISION)
    built = build(msgspec.structs.replace(recipe, training=bf16), torch.device("cpu"))
    built.run()
    updates, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < MIN_SECONDS or updates < MIN_UPDATES:
        built.run()
        updates += 1
    per_update = elapsed / updates
    tokens = recipe.model.context_length * recipe.training.micro_batch_size
    return {
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "backend": built.backend,
        "updates": updates,
        "setup_updates": built.setup_updates,
        "seconds_per_update": per_update,
        "flops_per_second": flops_per_token(recipe.model) * tokens / per_update,
    }


def run(args: argparse.Namespace) -> int:
    json.dump(measure(load_recipe(args.config, args.overrides), args.threads), sys.stdout)
    print()
    return 0


def register(sub) -> None:
    p = sub.add_parser("cpu-rate", help="the device the worker would train on; on a CPU, its training FLOP/s")
    add_recipe_args(p)
    p.add_argument("--threads", type=int, default=1, help="the threads a job's worker gets (its CPUs)")
    p.set_defaults(func=run)
