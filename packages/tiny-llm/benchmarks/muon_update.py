"""ArenaMuon against ArenaAdamW inside the worker's captured update, in one process (GPU only).

Per point (MODEL@CONTEXTxBATCH) and optimizer, in the order given (NAME-again times NAME again
later, so drift over the point shows): the worker's update as `tiny_llm.update.build` makes it
(compiled model, the complete update captured as one CUDA graph, the recipe's
`optimizer.name`), with the three timing events of `--optimizer-timing` in the graph:
- update_ms: wall-clock milliseconds per graph replay, the median of `--rounds` rounds of
  `--replays` replays (tokens/s from it);
- step_ms: the optimizer step inside the update (the events before and after it), the median
  over `--samples` single replays;
- step_alone_ms: the step captured alone and replayed back to back;
- with Muon, the step's pieces, each captured alone the same way (`pieces`): adamw_ms (the
  AdamW part: the norm, clip and counters and AdamW's own parameters), ns_ms (Newton-Schulz
  on every shape group's stack of random BF16 matrices, the products and their
  normalisation), ns_tflops (its FLOPs over ns_ms) and elementwise_ms (the rest of the step:
  momentum, clip and the update of the weights); where that rest ran as Triton passes,
  tensor_elementwise_ms times the tensor operations' version of it alone (ArenaMuon's
  `elementwise="tensor"`), for comparison;
- floor_ms: the step's floor (`peers.optimizer_floor`): Muon's Newton-Schulz FLOPs at the
  measured BF16 matrix ceiling plus the bytes of the element-wise work at the measured copy
  bandwidth (AdamW's alone for AdamW);
- peak_allocated_gib, and the first and last losses of the timed replays.

    python packages/tiny-llm/benchmarks/muon_update.py --output runs/muon-update.json \
        [--points 250m@2048x16 500m@2048x16] [--optimizers adamw muon adamw-again muon-again]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from peers import (  # peers.py puts the sources on sys.path
    attempt,
    ceilings,
    free,
    optimizer_floor,
    parse_point,
    provenance,
    recipe_for,
)

from throughput_schema import write_atomic  # noqa: E402
from throughput_schema.muon import MUON  # noqa: E402
from tiny_llm.arena_muon import ArenaMuon, newton_schulz  # noqa: E402
from tiny_llm.graph import capture, time_replays  # noqa: E402
from tiny_llm.update import build  # noqa: E402

CUDA = torch.device("cuda")
OPTIMIZERS = ["adamw", "muon", "adamw-again", "muon-again"]


def case(recipe, args, ceiling: dict) -> dict:
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    built = build(recipe, CUDA, timing_events=True)
    setup = time.perf_counter() - t0
    for _ in range(args.warmup):
        built.run()
    torch.cuda.synchronize()
    first_loss = built.update.loss.item()
    rounds = time_replays(built.run, args.replays, args.rounds)
    start, before_step, after_step = built.update.events
    steps, graphs = [], []
    for _ in range(args.samples):
        built.run()
        after_step.synchronize()
        steps.append(before_step.elapsed_time(after_step))
        graphs.append(start.elapsed_time(after_step))
    last_loss = built.update.loss.item()
    alone = capture(built.optimizer.step)
    step_alone = statistics.median(time_replays(alone.replay, 10, 5))
    pieces = muon_pieces(built.optimizer, step_alone) if isinstance(built.optimizer, ArenaMuon) else {}
    update_ms = statistics.median(rounds)
    out = {
        "ok": True,
        "setup_seconds": setup,
        "optimizer_kernel": built.optimizer.kernel,
        "update_ms": update_ms,
        "update_ms_rounds": rounds,
        "update_drift": (max(rounds) - min(rounds)) / update_ms,
        "tokens_per_second": recipe.training.batch_tokens / (update_ms / 1e3),
        "step_ms": statistics.median(steps),
        "graph_ms": statistics.median(graphs),
        "step_alone_ms": step_alone,
        "share": statistics.median(steps) / update_ms,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "losses": [first_loss, last_loss],
        **optimizer_floor(recipe, ceiling),
        **pieces,
    }
    out["step_over_floor"] = out["step_ms"] / out["floor_ms"]
    if pieces:
        out["ns_tflops"] = out["ns_tflop"] / out["ns_ms"] * 1e3
    del built, alone
    return out


def muon_pieces(opt: ArenaMuon, step_alone: float) -> dict:
    """Where ArenaMuon's step goes, each piece captured alone: AdamW's part, Newton-Schulz on
    random stacks of each group's shape (the products do not depend on the values), and the
    element-wise rest as the whole step's remainder."""
    adamw = capture(opt.adamw.step)
    adamw_ms = statistics.median(time_replays(adamw.replay, 10, 5))
    c = opt.config
    stacks = [torch.randn(g.momentum.shape, device=CUDA, dtype=opt.ns_dtype) for g in opt.groups]
    ns = capture(lambda: [newton_schulz(x, c.muon_ns_coefficients, c.muon_ns_steps) for x in stacks])
    ns_ms = statistics.median(time_replays(ns.replay, 10, 5))
    out = {"adamw_ms": adamw_ms, "ns_ms": ns_ms, "elementwise_ms": step_alone - adamw_ms - ns_ms}
    if opt.elementwise != "tensor":
        # The tensor operations' momentum and weight updates alone: the stack they build stands
        # in for the orthogonalised one (the weights it moves are not read again).
        def tensor_passes() -> None:
            s = opt._scalars()
            for group in opt.groups:
                opt._update(group, opt._momentum(group, s), s)

        tensor = capture(tensor_passes)
        out["tensor_elementwise_ms"] = statistics.median(time_replays(tensor.replay, 10, 5))
    return out


def point(text: str, args, ceiling: dict, deadline: float) -> dict:
    model, context, batch = parse_point(text)
    cases: dict[str, dict] = {}
    for name in args.optimizers:
        recipe = recipe_for(model, context, batch, name.removesuffix("-again"))  # the campaign's lr and beta2
        late = time.monotonic() > deadline
        cases[name] = {"ok": False, "error": "skipped: budget spent"} if late else attempt(case, recipe, args, ceiling)
        torch._dynamo.reset()
        free()
        print(f"{text} {name}: {summary(cases[name])}", flush=True)
    for c in cases.values():
        if c["ok"] and cases.get("adamw", {}).get("ok"):
            c["update_vs_adamw"] = c["update_ms"] / cases["adamw"]["update_ms"]
    return {"cases": cases}


def summary(c: dict) -> str:
    if not c["ok"]:
        return c["error"]
    return (
        f"update {c['update_ms']:.2f} ms ({c['tokens_per_second']:,.0f} tok/s), step {c['step_ms']:.2f} ms "
        f"({100 * c['share']:.1f}%), alone {c['step_alone_ms']:.2f} ms, floor {c['floor_ms']:.2f} ms "
        f"({c['step_over_floor']:.2f}x), peak {c['peak_allocated_gib']:.1f} GiB"
        + (
            f"; pieces: adamw {c['adamw_ms']:.2f} ms, newton-schulz {c['ns_ms']:.2f} ms "
            f"({c['ns_tflops']:.0f} TFLOP/s), element-wise {c['elementwise_ms']:.2f} ms"
            + (
                f" (tensor operations alone {c['tensor_elementwise_ms']:.2f} ms)"
                if "tensor_elementwise_ms" in c
                else ""
            )
            if "ns_ms" in c
            else ""
        )
    )


def optimizer_case(text: str) -> str:
    if text.removesuffix("-again") not in ("adamw", MUON):
        raise argparse.ArgumentTypeError(f"{text!r}: use adamw or muon, each optionally with -again")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--points", nargs="*", default=["250m@2048x16", "500m@2048x16"])
    ap.add_argument(
        "--optimizers", nargs="*", type=optimizer_case, default=OPTIMIZERS, help="in order; NAME-again times NAME again"
    )
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--replays", type=int, default=20, help="replays per timed round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=20, help="single replays read for the step's events")
    ap.add_argument("--budget-seconds", type=float, default=480.0, help="no new case starts after this")
    args = ap.parse_args(argv)
    deadline = time.monotonic() + args.budget_seconds
    result: dict = {**provenance(), "ceilings": ceilings(quick=True), "points": {}}
    print(f"{result['device']}, torch {result['torch']}, ceilings {result['ceilings']}", flush=True)
    for text in args.points:
        result["points"][text] = attempt(point, text, args, result["ceilings"], deadline)
        write_atomic(args.output, json.dumps(result, indent=2))  # after each point
    return 0


if __name__ == "__main__":
    sys.exit(main())
