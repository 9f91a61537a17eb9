"""Muon inside the project's update against fused AdamW: what issue 44's design rests on (GPU only).

One process, per point (MODEL@CONTEXTxBATCH): the project's model at its preset, torch.compile
(default mode), BF16 autocast, clip_grad_norm_(foreach=True), no CUDA graph: the update of
`peer_updates.py`'s peer A. The model is compiled once per point and each optimizer starts
from the same initial weights (copied back in place, so nothing recompiles) and the same inputs:
- adamw:      torch.optim.AdamW(fused=True) over everything (peer A's optimizer);
- muon:       torch.optim.Muon over the hidden 2-D matrices taken whole (qkv, proj, gate_up,
              down), fused AdamW over the rest (the tied embedding/head and the norms);
- muon-split: the same, with qkv split into q, k, v and gate_up into gate, up, as Muon's
              reference implementations treat them: each slice is a Parameter aliasing its
              rows of the fused weight, its gradient the same rows of the fused gradient, so
              torch's own Muon runs on 7 matrices a layer without touching the model;
- NAME-again: NAME timed again later in the same process (default: adamw-again, last), so drift
              over the point shows; `--optimizers` sets the order, e.g. interleaved at batch 1.
Muon's settings: momentum 0.95, Nesterov, 5 Newton-Schulz steps (torch's quintic coefficients),
adjust_lr_fn="match_rms_adamw", the recipe's lr and weight decay.

Per optimizer: the first losses from the same start; then repeats of N updates timed by the wall
clock (tokens/s) with CUDA events inside each update (forward+backward, clip, optimizer.step()s),
the host's time spent in the step calls, the peak allocated memory, and the step alone on a
backward's gradients (`time_replays`, no forward in between). Also, per model: Newton-Schulz
alone on random matrices of the hidden shapes, torch's per-matrix loop against a batched bmm
version in a CUDA graph, against the FLOP count (2·(2·m²·n + m³) per iteration, m <= n) and the
measured BF16 matrix ceiling: what an own, captured Muon (issue 44 part 2) could reach.

    python packages/tiny-llm/benchmarks/muon_probe.py --output runs/muon.json \
        [--points 250m@2048x16 250m@2048x1 500m@2048x16] [--budget-seconds 500]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from peer_updates import fused_adamw  # the benchmarks folder is the script's own: on sys.path
from peers import ceilings, free, parse_point, recipe_for  # peers.py puts the sources on sys.path

from tiny_llm.graph import capture, time_replays  # noqa: E402
from tiny_llm.model import build_model  # noqa: E402
from tiny_llm.update import make_inputs  # noqa: E402

CUDA = torch.device("cuda")
OPTIMIZERS = ["adamw", "muon", "muon-split", "adamw-again"]
MUON = {"momentum": 0.95, "nesterov": True, "ns_steps": 5, "adjust_lr_fn": "match_rms_adamw"}
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch's defaults (Keller Jordan's quintic)


def hidden_matrices(model, split: bool):
    """(name, weight, [row ranges]) for Muon's matrices: every 2-D weight inside the blocks.
    Whole: one range per weight. Split: qkv as q, k, v and gate_up as gate, up (the model's
    own `Attention.widths` and `SwiGLU`'s chunk(2))."""
    out = []
    for name, p in model.named_parameters():
        if not name.startswith("blocks.") or p.ndim != 2:
            continue
        widths = [p.shape[0]]
        if split and name.endswith("attn.qkv.weight"):
            widths = list(model.blocks[0].attn.widths)
        elif split and name.endswith("mlp.gate_up.weight"):
            widths = [p.shape[0] // 2] * 2
        starts = [sum(widths[:i]) for i in range(len(widths))]
        out.append((name, p, [(s, s + w) for s, w in zip(starts, widths)]))
    return out


def ns_flops(shapes, steps: int) -> float:
    """Newton-Schulz FLOPs per optimizer step: per iteration X·Xᵀ (2m²n), A·A (2m³), B·X (2m²n)."""
    total = 0.0
    for rows, cols in shapes:
        m, n = min(rows, cols), max(rows, cols)
        total += steps * (4 * m * m * n + 2 * m**3)
    return total


class Optimizers:
    """The optimizers of one case, stepped together; `before_step` re-points split slices' grads."""

    def __init__(self, name: str, model, recipe) -> None:
        o = recipe.optimizer
        params = list(model.parameters())
        self.slices: list[tuple[torch.nn.Parameter, torch.nn.Parameter, int, int]] = []
        self.owned: dict[str, list[str]] = {}
        self.muon_shapes: list[tuple[int, ...]] = []
        name = name.removesuffix("-again")
        if name == "adamw":
            self.opts = [fused_adamw(params, o)]
            self.owned["adamw"] = [n for n, _ in model.named_parameters()]
            return
        hidden = hidden_matrices(model, split=name == "muon-split")
        hidden_ids = {id(p) for _, p, _ in hidden}
        muon_params = []
        for _, p, ranges in hidden:
            if len(ranges) == 1:
                muon_params.append(p)
                continue
            for a, b in ranges:  # a Parameter aliasing rows a:b of the fused weight
                s = torch.nn.Parameter(p.data[a:b])
                self.slices.append((s, p, a, b))
                muon_params.append(s)
        self.muon_shapes = [tuple(p.shape) for p in muon_params]
        rest = [p for p in params if id(p) not in hidden_ids]
        self.owned["muon"] = [f"{n}[{a}:{b}]" for n, _, r in hidden for a, b in r]
        self.owned["adamw"] = [n for n, p in model.named_parameters() if id(p) not in hidden_ids]
        muon = torch.optim.Muon(muon_params, lr=o.lr, weight_decay=o.weight_decay, **MUON)
        self.opts = [muon, fused_adamw(rest, o)]

    def step(self) -> None:
        for s, p, a, b in self.slices:
            s.grad = p.grad[a:b]  # a view: contiguous rows of the fused gradient
        for opt in self.opts:
            opt.step()

    def zero_grad(self) -> None:
        for opt in self.opts:
            opt.zero_grad(set_to_none=True)
        for s, _, _, _ in self.slices:
            s.grad = None


def spread(values: list[float]) -> float:
    """(max - min) / median: the repeat drift."""
    return (max(values) - min(values)) / statistics.median(values)


def case(name, model, compiled, recipe, inputs, targets, initial, args, times_loss: bool) -> dict:
    params = list(model.parameters())
    with torch.no_grad():  # every optimizer starts from the same weights, in place: no recompile
        for p, w in zip(params, initial):
            p.copy_(w)
    opt = Optimizers(name, model, recipe)
    clip = recipe.training.grad_clip
    free()
    torch.cuda.reset_peak_memory_stats()
    host_step: list[float] = []

    def update(marks=None):
        if marks:
            marks[0].record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(inputs, targets)
        loss.backward()
        if marks:
            marks[1].record()
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        if marks:
            marks[2].record()
        t0 = time.perf_counter()
        opt.step()
        if marks:
            host_step.append((time.perf_counter() - t0) * 1e3)
            marks[3].record()
        opt.zero_grad()
        return loss

    t0 = time.perf_counter()
    losses = [update().item() for _ in range(args.loss_steps if times_loss else 1)]
    first_seconds = time.perf_counter() - t0
    for _ in range(args.warmup):
        update()
    torch.cuda.synchronize()
    tokens = recipe.training.batch_tokens
    n = args.updates_b1 if recipe.training.micro_batch_size == 1 else args.updates
    repeats = []
    for _ in range(args.repeats):
        marks = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(n)]
        host_step.clear()
        t0 = time.perf_counter()
        for i in range(n):
            update(marks[i])
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        seg = {
            "forward_backward_ms": [m[0].elapsed_time(m[1]) for m in marks],
            "clip_ms": [m[1].elapsed_time(m[2]) for m in marks],
            "optimizer_step_ms": [m[2].elapsed_time(m[3]) for m in marks],
            "update_events_ms": [m[0].elapsed_time(m[3]) for m in marks],
        }
        rep = {"tokens_per_second": n * tokens / wall, "update_ms": wall / n * 1e3, "updates": n}
        rep.update({k: statistics.median(v) for k, v in seg.items()})
        rep["optimizer_step_host_ms"] = statistics.median(host_step)
        repeats.append(rep)
    out = {
        "ok": True,
        "first_losses": losses,
        "first_updates_seconds": first_seconds,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "repeats": repeats,
        "owned": {k: len(v) for k, v in opt.owned.items()},
        "owned_names": opt.owned,
        "muon_shapes": opt.muon_shapes,
    }
    for key in repeats[0]:
        if key != "updates":
            out[key] = statistics.median(r[key] for r in repeats)
    out["tokens_per_second_drift"] = spread([r["tokens_per_second"] for r in repeats])
    out["optimizer_step_drift"] = spread([r["optimizer_step_ms"] for r in repeats])
    out["optimizer_share"] = out["optimizer_step_ms"] / out["update_ms"]
    # The step alone, back to back on the gradients of one backward (no forward to hide behind).
    with torch.autocast("cuda", dtype=torch.bfloat16):
        compiled(inputs, targets).backward()
    out["optimizer_step_alone_ms"] = statistics.median(time_replays(opt.step, 10, 5))
    opt.zero_grad()
    return out


def point(text: str, args, deadline: float) -> dict:
    model_name, context, batch = parse_point(text)
    recipe = recipe_for(model_name, context, batch)
    model = build_model(recipe.model, CUDA, seed=recipe.training.seed)
    compiled = torch.compile(model)
    initial = [p.detach().clone() for p in model.parameters()]
    inputs, targets = make_inputs(recipe, CUDA)
    out: dict = {"parameters": sum(p.numel() for p in model.parameters()), "cases": {}}
    for name in args.optimizers:
        if time.monotonic() > deadline:
            out["cases"][name] = {"ok": False, "error": "skipped: budget spent"}
            continue
        try:
            out["cases"][name] = case(
                name, model, compiled, recipe, inputs, targets, initial, args, times_loss=not name.endswith("-again")
            )
        except Exception as exc:  # noqa: BLE001 - one optimizer failing leaves the others to compare
            traceback.print_exc()
            out["cases"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
        free()
        c = out["cases"][name]
        if c["ok"]:
            print(
                f"{text} {name}: {c['tokens_per_second']:,.0f} tok/s, update {c['update_ms']:.2f} ms, "
                f"step {c['optimizer_step_ms']:.2f} ms ({100 * c['optimizer_share']:.1f}%), alone "
                f"{c['optimizer_step_alone_ms']:.2f} ms, host {c['optimizer_step_host_ms']:.2f} ms, "
                f"peak {c['peak_allocated_gib']:.1f} GiB, drift {100 * c['tokens_per_second_drift']:.2f}%, "
                f"losses {[round(x, 4) for x in c['first_losses']]}",
                flush=True,
            )
    base = out["cases"].get("adamw", {})
    # Every AdamW repeat of the point pooled: the baseline where the drift between runs is large.
    pooled = [r["tokens_per_second"] for n, c in out["cases"].items() if c.get("ok") and n.startswith("adamw")
              for r in c["repeats"]]  # fmt: skip
    for c in out["cases"].values():
        if c.get("ok") and base.get("ok"):
            c["vs_adamw"] = c["tokens_per_second"] / base["tokens_per_second"]
            c["vs_adamw_pooled"] = c["tokens_per_second"] / statistics.median(pooled)
    return out


def ns_batched(x: torch.Tensor, steps: int, eps: float = 1e-7) -> torch.Tensor:
    """torch's Newton-Schulz (BF16, transposed to wide, Frobenius-normed) on a (B, m, n) stack."""
    a, b, c = NS_COEFFICIENTS
    x = x / x.norm(dim=(1, 2), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        g = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(g, g, g, beta=b, alpha=c), x, beta=a)
    return x


def ns_alone(model_name: str, matmul_flops: float) -> dict:
    """Newton-Schulz alone over one step's hidden matrices (random BF16), whole and split:
    torch's own per-matrix loop (eager, as torch.optim.Muon runs it) and one batched product per
    shape inside a CUDA graph (no launch gaps): achieved TFLOP/s against the FLOP count."""
    recipe = recipe_for(model_name, 2048, 1)
    model = build_model(recipe.model, "meta")
    out = {}
    for split in (False, True):
        shapes = [(b - a, p.shape[1]) for _, p, r in hidden_matrices(model, split) for a, b in r]
        flops = ns_flops(shapes, MUON["ns_steps"])
        gen = torch.Generator(device=CUDA).manual_seed(0)
        mats = [torch.randn(s, device=CUDA, generator=gen) for s in shapes]
        wide = [m.T if m.shape[0] > m.shape[1] else m for m in mats]
        groups: dict[tuple, list] = {}
        for m in wide:
            groups.setdefault(tuple(m.shape), []).append(m)
        stacks = [torch.stack(g).bfloat16() for g in groups.values()]
        muon = torch.optim.Muon([torch.nn.Parameter(m) for m in mats], lr=1e-3, **MUON)
        for p, m in zip(muon.param_groups[0]["params"], mats):
            p.grad = m.clone()
        loop_ms = statistics.median(time_replays(muon.step, 5, 5))  # the whole step: NS + lerp + update

        def batched(stacks=stacks):
            for s in stacks:
                ns_batched(s, MUON["ns_steps"])

        graph = capture(batched)
        batched_ms = statistics.median(time_replays(graph.replay, 10, 5))
        out["split" if split else "whole"] = {
            "matrices": len(shapes),
            "shape_groups": {"x".join(map(str, k)): len(v) for k, v in groups.items()},
            "ns_tflop_per_step": flops / 1e12,
            "ns_ms_at_matmul_ceiling": flops / matmul_flops * 1e3,
            "muon_step_loop_ms": loop_ms,
            "ns_batched_graph_ms": batched_ms,
            "batched_tflops": flops / (batched_ms / 1e3) / 1e12,
        }
        print(
            f"NS alone {model_name} {'split' if split else 'whole'}: {out['split' if split else 'whole']}", flush=True
        )
        free()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--points", nargs="*", default=["250m@2048x16", "250m@2048x1", "500m@2048x16"])
    ap.add_argument("--optimizers", nargs="*", default=OPTIMIZERS, help="cases in order; NAME-again repeats NAME")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--updates", type=int, default=20, help="updates per timed repeat")
    ap.add_argument("--updates-b1", type=int, default=60, help="updates per timed repeat at batch 1")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--loss-steps", type=int, default=6, help="first losses recorded per optimizer")
    ap.add_argument("--budget-seconds", type=float, default=500.0, help="no new case starts after this")
    args = ap.parse_args(argv)
    bad = [n for n in args.optimizers if n.removesuffix("-again") not in OPTIMIZERS[:3]]
    if bad:
        ap.error(f"unknown optimizers {bad}: use {OPTIMIZERS[:3]}, each optionally with -again")
    deadline = time.monotonic() + args.budget_seconds
    result: dict = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "has_torch_optim_muon": hasattr(torch.optim, "Muon"),
        "muon_settings": {**MUON, "ns_coefficients": NS_COEFFICIENTS, "lr": "recipe", "weight_decay": "recipe"},
        "protocol": "peer A's update (compiled model, BF16 autocast, clip foreach, no CUDA graph); "
        "optimizer.lr=0.001 optimizer.beta2=0.99 as the campaign sets them",
    }
    if not result["has_torch_optim_muon"]:
        print("torch.optim.Muon does not exist in this torch", torch.__version__)
        args.output.write_text(json.dumps(result, indent=2))
        return 1
    result["muon_signature"] = str(inspect.signature(torch.optim.Muon))
    print("torch", torch.__version__, result["device"], "Muon", result["muon_signature"], flush=True)
    result["ceilings"] = ceilings(quick=True)
    mm = result["ceilings"]["matmul_bf16_flops"]
    print(
        f"ceilings: matmul {mm / 1e12:.0f} TFLOP/s, copy {result['ceilings']['copy_bytes_per_second'] / 1e12:.2f} TB/s"
    )
    result["ns_alone"], result["points"] = {}, {}
    for model_name in dict.fromkeys(parse_point(p)[0] for p in args.points):
        try:
            result["ns_alone"][model_name] = ns_alone(model_name, mm)
        except Exception as exc:  # noqa: BLE001 - the update timings matter more
            traceback.print_exc()
            result["ns_alone"][model_name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    args.output.write_text(json.dumps(result, indent=2))
    for text in args.points:
        try:
            result["points"][text] = point(text, args, deadline)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next point
            traceback.print_exc()
            result["points"][text] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
        finally:
            torch._dynamo.reset()
            free()
        args.output.write_text(json.dumps(result, indent=2))  # written after each point
    return 0


if __name__ == "__main__":
    sys.exit(main())
