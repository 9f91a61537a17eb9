"""Our complete-update graph against the updates a user would write instead (GPU only).

Cases, on identical shapes, seed, inputs and optimizer settings, in one process:
- ours:   the worker's update (compiled model, ArenaAdamW, whole update as one CUDA graph);
- peer A: plain compiled PyTorch: the same model module, torch.compile (default mode),
          clip_grad_norm_(foreach=True), torch.optim.AdamW(fused=True), no CUDA graph;
- peer B: transformers' causal LM of the same shape with SDPA attention (if transformers
          imports), no compile, same optimizer and clipping: the class that has the recipe's
          knobs (`tiny_llm.hf_weights.transformers_model`: Qwen3ForCausalLM for a q/k norm,
          Qwen2ForCausalLM for q/k/v biases, else LlamaForCausalLM), with its kv heads, head
          size, tied or untied head and RoPE scaling.
Also: the matmul ceiling (8192^3 BF16), the copy ceiling (2 GiB device-to-device),
ArenaAdamW.step alone as its own graph vs its floor (32 bytes/parameter at the measured
copy bandwidth), and peer A's clip + fused AdamW alone. Each case records the parameter count
of the model it built; MFU is the schema's FLOPs per token (`throughput_schema.recipe.
flops_per_token`, every knob counted) times the rate over the datasheet peak.
With `--optimizer-kernels fused triton`, ArenaAdamW.step alone with each kernel side by
side (`optimizer_kernels` in each point; `--optimizer-only` skips the update cases).

Each case runs in try/except and a failure is recorded, not fatal. Usage:

    python packages/tiny-llm/benchmarks/peers.py --output runs/peers-h200.json [--quick] \
        [--points 250m@2048x16 500m@2048x16] [--optimizer-kernels fused triton [--optimizer-only]] \
        [--kernel cross_entropy=triton]      # ours with other kernel choices, recorded in its "kernels"
        [--cases ours peer_a peer_b]         # which update cases run (default: these three)
        [--optimizer-name muon --cases ours peer_muon]   # ours with ArenaMuon against torch.optim.Muon
        [--precisions bf16 fp8-tensorwise fp8-rowwise]   # each case at each precision (default bf16)

At a precision other than bf16 a case's key is CASE@PRECISION (e.g. "peer_a@fp8-tensorwise"),
and peer B does not run (transformers' model has no FP8 here). Each case records its peak
allocated and reserved memory and its first loss (the loss at the initial weights, the same
inputs for every case). MFU stays one definition at every precision (the same FLOPs over the
dense BF16 peak: BF16-equivalent at FP8); the report names the dense FP8 peak beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "packages" / "tiny-llm" / "src"), str(ROOT / "packages" / "throughput-schema" / "src")]

import msgspec  # noqa: E402
from peer_lines import print_point  # noqa: E402
from peer_updates import case_peer_a, case_peer_b, case_peer_muon, timed_rate  # noqa: E402

from throughput_schema.argparsing import add_optimizer_name  # noqa: E402
from throughput_schema.muon import MUON, muon_matrices, newton_schulz_flops  # noqa: E402
from throughput_schema.precision import GUIDE_PRECISION, PRECISIONS, is_fp8, peak_fp8_flops  # noqa: E402
from throughput_schema.recipe import flops_per_token, load_recipe, parameter_count  # noqa: E402
from tiny_llm import hardware  # noqa: E402
from tiny_llm.arena_adamw import KERNELS, ArenaAdamW  # noqa: E402
from tiny_llm.graph import capture, time_replays  # noqa: E402
from tiny_llm.kernels import Kernels  # noqa: E402
from tiny_llm.model import build_model  # noqa: E402
from tiny_llm.summary import MFU_FORMULA  # noqa: E402
from tiny_llm.update import build, make_inputs, make_optimizer  # noqa: E402

# Issue 8's targets: (model, context, batch).
DEFAULT_POINTS = ["20m@512x8", "20m@512x128", "90m@1024x32", "250m@2048x16", "500m@2048x16", "250m@4096x8"]
CUDA = torch.device("cuda")


def parse_point(text: str):
    model, rest = text.split("@")
    context, batch = rest.split("x")
    return model, int(context), int(batch)


def recipe_for(model: str, context: int, batch: int, optimizer: str = "adamw"):
    return load_recipe(
        ROOT / "configs" / f"{model}.yaml",
        [
            f"model.context_length={context}",
            f"training.micro_batch_size={batch}",
            f"training.batch_tokens={context * batch}",
            "optimizer.lr=0.001",
            "optimizer.beta2=0.99",
            f"optimizer.name={optimizer}",
        ],
    )


def optimizer_floor(recipe, ceiling: dict) -> dict:
    """The optimizer step's floor: Muon's Newton-Schulz FLOPs (`throughput_schema.muon`) at the
    measured BF16 matrix ceiling, plus the bytes the element-wise work must move at the measured
    copy bandwidth: AdamW reads the gradient and reads and writes both moments and the weight
    (32 bytes a parameter, ArenaAdamW's floor); Muon's matrices read the gradient and read and
    write the momentum and the weight (20). With AdamW alone it is ArenaAdamW's 32 B/parameter."""
    o = recipe.optimizer
    shapes = [m.shape for m in muon_matrices(recipe.model)] if o.name == MUON else []
    flops = newton_schulz_flops(shapes, o.muon_ns_steps)
    owned = sum(r * c for r, c in shapes)
    moved = 20 * owned + 32 * (parameter_count(recipe.model) - owned)
    ns_ms = flops / ceiling["matmul_bf16_flops"] * 1e3
    bytes_ms = moved / ceiling["copy_bytes_per_second"] * 1e3
    return {"ns_tflop": flops / 1e12, "ns_ms_at_ceiling": ns_ms, "bytes": moved, "bytes_ms_at_copy": bytes_ms,
            "floor_ms": ns_ms + bytes_ms}  # fmt: skip


def provenance() -> dict:
    """What a benchmark's JSON opens with: its command, when, on which GPU, with which torch."""
    return {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }


def attempt(fn, *args) -> dict:
    """`fn(*args)`, or where it raises, the error as a failed case (traceback printed): one case
    failing leaves the others to compare."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded in the case
        traceback.print_exc()
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


def free():
    gc.collect()
    torch.cuda.empty_cache()


def parse_kernels(choices: list[str]) -> Kernels:
    """`Kernels` from FIELD=VALUE pairs (`--kernel`), e.g. ["cross_entropy=triton"]."""
    pairs = dict(c.split("=", 1) for c in choices)
    return Kernels(**{k: int(v) if v.isdigit() else v for k, v in pairs.items()})


def first_loss(recipe) -> float:
    """The loss at the initial weights on the recipe's inputs: what the first update of any case
    computes (ours runs its first updates inside setup, unseen)."""
    model = build_model(recipe.model, CUDA, seed=recipe.training.seed)
    if is_fp8(recipe.training.precision):
        from tiny_llm.fp8 import convert

        convert(model, recipe.training.precision)
    inputs, targets = make_inputs(recipe, CUDA)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(inputs, targets).item()
    del model
    free()
    return loss


def case_ours(recipe, seconds, windows, kernels: Kernels = Kernels()) -> dict:
    first = first_loss(recipe)
    torch.cuda.reset_peak_memory_stats(CUDA)
    t0 = time.perf_counter()
    built = build(recipe, CUDA, kernels=kernels)
    setup = time.perf_counter() - t0
    out = timed_rate(built.run, recipe.training.batch_tokens, seconds, windows)
    out["setup_seconds"] = setup
    out["first_loss"] = first
    out["parameters"] = built.parameters
    out["kernels"] = built.ran().record()
    out["fp8_linears"] = len(built.fp8.converted) if built.fp8 else 0
    # ArenaAdamW.step alone, as its own graph (clip, finite check, AdamW, counters).
    g = capture(built.optimizer.step)
    out["optimizer_ms"] = statistics.median(time_replays(g.replay, 20, 5))
    out["loss"] = built.update.loss.item()
    del built, g
    return out


def case_optimizers(recipe, kernels: list[str], triton_blocks: list[int], floor_ms: float) -> dict:
    """ArenaAdamW.step alone per kernel, each its own graph over its own copy of the point's
    parameters, starting from the same random gradients (fused stores its clipped gradient
    back, so it clips only at first; no kernel's work depends on the values). The timing
    rounds alternate between kernels, so drift in clocks or heat falls on all alike.
    "triton-bN" is the triton kernel with update blocks of N elements."""
    names = [*kernels, *(f"triton-b{block}" for block in triton_blocks)]
    out, graphs = {}, {}
    for name in names:
        kernel, _, block = name.partition("-b")
        try:
            opt = make_optimizer(build_model(recipe.model, CUDA, seed=recipe.training.seed), recipe, kernel)
            assert isinstance(opt, ArenaAdamW), "the guide's recipe: AdamW"
            if block:
                from tiny_llm.triton_adamw import TritonStep

                opt._triton = TritonStep(opt, block=int(block))
            opt.grads.normal_(generator=torch.Generator(device=CUDA).manual_seed(recipe.training.seed))
            graphs[name] = (opt, capture(opt.step))
            graphs[name][1].replay()  # the first replay pays for cold caches and clocks; not timed
        except Exception as exc:  # noqa: BLE001 - one kernel failing leaves the others to compare
            traceback.print_exc()
            out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    samples = {name: [] for name in graphs}
    for _ in range(7):
        for name, (_, graph) in graphs.items():
            samples[name] += time_replays(graph.replay, 20, 1)
    for name, ms in samples.items():
        out[name] = {
            "ok": True,
            "ms": statistics.median(ms),
            "rounds_ms": ms,
            "vs_floor": statistics.median(ms) / floor_ms,
            "finite": graphs[name][0].metrics()["finite"],
        }
    if out.get("fused", {}).get("ok"):
        for c in out.values():
            if c["ok"]:
                c["vs_fused"] = c["ms"] / out["fused"]["ms"]
    del graphs
    return {name: out[name] for name in names}


CASES = {"ours": case_ours, "peer_a": case_peer_a, "peer_b": case_peer_b, "peer_muon": case_peer_muon}


def ceilings(quick: bool) -> dict:
    n = 8192
    a = torch.randn(n, n, device=CUDA, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=CUDA, dtype=torch.bfloat16)
    ms = statistics.median(time_replays(lambda: torch.mm(a, b), 5 if quick else 10, 3))
    matmul = 2 * n**3 / (ms / 1e3)
    del a, b
    copy_bw = copy_bandwidth()
    free()
    return {"matmul_bf16_flops": matmul, "copy_bytes_per_second": copy_bw}


def copy_bandwidth() -> float:
    """Bytes read + written per second by a 2 GiB device-to-device copy (the optimizer's floor)."""
    src = torch.empty(2 * 1024**3 // 4, device=CUDA, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = statistics.median(time_replays(lambda: dst.copy_(src), 10, 3))
    del src, dst
    return 2 * (2 * 1024**3) / (ms / 1e3)


def run_case(name, fn, *args) -> dict:
    free()
    try:
        torch.cuda.reset_peak_memory_stats(CUDA)
        out = fn(*args)
        return {
            "ok": True,
            **out,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(CUDA),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(CUDA),
        }
    except Exception as exc:  # noqa: BLE001 - record and continue with the next case
        traceback.print_exc()
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:400]}
    finally:
        torch._dynamo.reset()
        free()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--points", nargs="*", default=DEFAULT_POINTS, help="MODEL@CONTEXTxBATCH, e.g. 250m@2048x16")
    ap.add_argument("--quick", action="store_true", help="shorter windows (about 1 s x 3)")
    ap.add_argument("--no-peer-b", action="store_true")
    ap.add_argument("--cases", nargs="*", default=["ours", "peer_a", "peer_b"], choices=list(CASES),
                    help="which update cases run at each point (default: ours, peer_a, peer_b; --no-peer-b "
                    "drops peer_b; peer_muon: torch.optim.Muon + fused AdamW, beside ours with --optimizer-name muon)")  # fmt: skip
    add_optimizer_name(ap, "ours trains with, and whose floor optimizer_floor_ms is (peer_a is AdamW, peer_muon Muon)")
    ap.add_argument("--precisions", nargs="*", default=[GUIDE_PRECISION], choices=PRECISIONS,
                    help=f"each update case at each precision (default {GUIDE_PRECISION}; fp8-* needs torchao)")  # fmt: skip
    ap.add_argument("--budget-seconds", type=float, default=float("inf"),
                    help="start no update case after this many seconds (the cases left say so)")  # fmt: skip
    ap.add_argument("--optimizer-kernels", nargs="*", default=[], choices=KERNELS, metavar="KERNEL",
                    help=f"also time ArenaAdamW.step alone with each kernel ({', '.join(KERNELS)}), side by side")  # fmt: skip
    ap.add_argument("--triton-blocks", nargs="*", type=int, default=[], metavar="N",
                    help="with --optimizer-kernels: also the triton kernel with update blocks of N elements")  # fmt: skip
    ap.add_argument("--optimizer-only", action="store_true", help="only the ceilings and --optimizer-kernels")
    ap.add_argument("--kernel", action="append", default=[], metavar="FIELD=VALUE",
                    help="ours with this kernel choice, repeatable, e.g. cross_entropy=triton (default: Kernels())")  # fmt: skip
    args = ap.parse_args(argv)
    kernels = parse_kernels(args.kernel)
    if not torch.cuda.is_available():
        print("peers.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    seconds, windows = (1.0, 3) if args.quick else (3.0, 3)
    started = time.perf_counter()
    hw = hardware.collect(CUDA)
    peak = hardware.peak_bf16_flops(hw.gpu_name, hw.gpu_memory_bytes)
    machine = {"gpu": hw.gpu_name, "memory": hw.gpu_memory_bytes, "torch": hw.torch, "cuda": hw.cuda,
                "driver": hw.driver, "triton": triton_version()}  # fmt: skip
    report = {"hardware": machine, "peak_bf16_flops": peak, "ceilings": ceilings(args.quick), "command": sys.argv,
              "mfu_formula": MFU_FORMULA, "points": []}  # fmt: skip
    report["peak_fp8_flops"] = peak_fp8_flops(hw.gpu_name, hw.gpu_memory_bytes)
    copy_bw = report["ceilings"]["copy_bytes_per_second"]
    print(
        f"{hw.gpu_name}: matmul {report['ceilings']['matmul_bf16_flops'] / 1e12:.0f} TFLOP/s, "
        f"copy {copy_bw / 1e12:.2f} TB/s, peak {peak}"
    )
    try:
        import transformers  # noqa: F401

        have_hf = not args.no_peer_b
    except Exception:  # noqa: BLE001
        have_hf = False
    cases = [c for c in args.cases if c != "peer_b" or have_hf]
    for text in args.points:
        model, context, batch = parse_point(text)
        recipe = recipe_for(model, context, batch, args.optimizer_name or "adamw")
        P, fpt = parameter_count(recipe.model), flops_per_token(recipe.model)
        point = {"point": text, "parameters": P, "flops_per_token": fpt,
                 "optimizer_floor_ms": optimizer_floor(recipe, report["ceilings"])["floor_ms"]}  # fmt: skip
        if args.optimizer_kernels or args.triton_blocks:
            free()
            point["optimizer_kernels"] = case_optimizers(
                recipe, args.optimizer_kernels, args.triton_blocks, point["optimizer_floor_ms"]
            )
            free()
        if not args.optimizer_only:
            for precision in args.precisions:
                at = msgspec.structs.replace(
                    recipe, training=msgspec.structs.replace(recipe.training, precision=precision)
                )
                for case in cases if precision == GUIDE_PRECISION else [c for c in cases if c != "peer_b"]:
                    extra = (kernels,) if case == "ours" else ()
                    key = case if precision == GUIDE_PRECISION else f"{case}@{precision}"
                    if time.perf_counter() - started > args.budget_seconds:
                        point[key] = {"ok": False, "error": f"not run: past --budget-seconds {args.budget_seconds:g}"}
                        continue
                    point[key] = run_case(key, CASES[case], at, seconds, windows, *extra)
                    write_report(args.output, report, point)  # a run cut short keeps every case done
        for key in [k for k, v in point.items() if isinstance(v, dict) and "ok" in v]:
            c = point.get(key)
            if c and c.get("ok") and peak:
                c["mfu"] = fpt * c["tokens_per_second"] / peak
            if c and c.get("ok") and c.get("parameters") != P:  # a peer of another shape is no peer
                c["parameters_differ"] = True
                print(f"{text}: {key} built {c.get('parameters'):,} parameters, the recipe counts {P:,}", flush=True)
        print_point(point)
        write_report(args.output, report, point)
    print(f"wrote {args.output}")
    return 0


def write_report(output: Path, report: dict, point: dict) -> None:
    """The report with `point` as its last point, written whole after every case."""
    if not report["points"] or report["points"][-1] is not point:
        report["points"].append(point)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.partial")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(output)


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


if __name__ == "__main__":
    sys.exit(main())
