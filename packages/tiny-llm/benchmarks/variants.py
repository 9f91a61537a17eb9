"""Speed variants (tiny_llm.kernels) against the default update, measured in one process.

For each point, each case is built through the worker's own path (`tiny_llm.update.build`:
compile, eager warm-up, whole-update CUDA graph) and then:
1. equality: `--check-updates` (default 4) graph replays after setup, the same count in
   every case; the losses and the weight arena are compared with the baseline's
   (equal = every loss within 2e-2 and ||w - w_base|| < 0.25·||w_base - w_init||, the
   criterion of the GPU tests for BF16 kernels that round differently, or, once `repeat`
   has measured how far the baseline drifts from itself, within twice that drift: at
   250m the rebuilt baseline alone differs by 0.11 in loss after four updates);
2. speed: the worker's protocol (`tiny_llm.protocol.measure`: warm-up, calibration,
   windows with the exact counter and finite checks) with short windows.
Cases: baseline (Kernels(): on CUDA the Triton optimizer and SwiGLU, the defaults since
issue 20), repeat (the baseline rebuilt: the drift BF16 rounding alone
causes, against which the variants' differences read; at 250m four updates on a repeated
batch already drift ~0.1 in loss), attn-flash / attn-cudnn / attn-efficient (pinned SDPA
kernel), ce-chunked (LM head + cross-entropy over token chunks), ce-triton (the loss and
the logits' gradient in one Triton pass, tiny_llm.triton_cross_entropy), inductor-cd (inductor's
coordinate-descent tuning), opt-compiled (ArenaAdamW's step through inductor),
opt-fused (`torch._fused_adamw_`, the default on CUDA before issue 20), opt-triton (its
two Triton passes, tiny_llm.triton_adamw: the baseline's own choice on CUDA where triton
imports), max-autotune (compile mode max-autotune-no-cudagraphs; its compile
takes minutes at 250m, so not in the default set), and best: the faster-than-baseline
choices of this point combined (built only when two or more won). Each case also times ArenaAdamW.step
alone against its floor (32 bytes per parameter at the copy bandwidth measured first).
Every case runs in try/except (a failure is recorded and the run goes on); the JSON is
rewritten after every case, so a run cut short keeps what it measured.
Also: swiglu-default (silu(gate) * up as inductor fuses it, the default before issue 20)
and swiglu-triton (SwiGLU forward and backward in Triton, tiny_llm.triton_swiglu: the
baseline's own choice on CUDA where triton imports), and norm-triton (each residual add, RMSNorm
and the cast in one Triton pass forward and backward, tiny_llm.triton_norm), and rope-triton (q and k
rotated from the QKV projection's output and d(qkv) written whole, tiny_llm.triton_rope). Each case
records the kernels that ran ("auto" resolved).

Run on the H200 (torch from the image; msgspec carried in .whl):

    source tools/gpu-env.sh && python3 packages/tiny-llm/benchmarks/variants.py --quick \\
        --output $OUT/variants.json

The default set (5 points x 7 cases, headline points first) takes well over 8 minutes
with --quick; `--budget-seconds` (default 450) skips the remaining cases once spent,
recorded as skipped. Narrow it with `--points 250m@2048x16` and/or
`--cases baseline attn-flash ce-chunked best`. `--device cpu` runs a smoke test
(eager, no graph; tiny@128x2) so the script itself is covered by CPU tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from dataclasses import fields, replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
# HERE too: the shapes, recipes and copy ceiling are benchmarks/peers.py's, so both compare alike.
sys.path[:0] = [
    str(HERE),
    str(ROOT / "packages" / "tiny-llm" / "src"),
    str(ROOT / "packages" / "throughput-schema" / "src"),
]

from peers import copy_bandwidth, parse_point, recipe_for  # noqa: E402

from throughput_schema import Protocol  # noqa: E402
from throughput_schema.recipe import flops_per_token, parameter_count  # noqa: E402
from tiny_llm import hardware  # noqa: E402
from tiny_llm.arena_adamw import ArenaAdamW  # noqa: E402
from tiny_llm.graph import capture, time_replays  # noqa: E402
from tiny_llm.kernels import Kernels  # noqa: E402
from tiny_llm.model import build_model  # noqa: E402
from tiny_llm.protocol import Measurement, measure  # noqa: E402
from tiny_llm.update import build  # noqa: E402
from tiny_llm.worker import TorchRunner  # noqa: E402

# Headline points first, so a budget cut loses the least important ones.
DEFAULT_POINTS = ["250m@2048x16", "500m@2048x16", "90m@1024x32", "250m@4096x8", "20m@512x128"]
CASES = {
    "baseline": Kernels(),
    "repeat": Kernels(),  # the default rebuilt: how far BF16 rounding alone drifts in loss and weights
    "attn-flash": Kernels(attention="flash"),
    "attn-cudnn": Kernels(attention="cudnn"),
    "attn-efficient": Kernels(attention="efficient"),
    "attn-math": Kernels(attention="math"),  # the unfused reference kernel (CPU smoke tests)
    "attn-fa4": Kernels(attention="fa4"),  # FlashAttention-4 (the tiny-llm[fa4] extra, Hopper only)
    "attn-sdpa": Kernels(attention="sdpa"),  # PyTorch's SDPA choice, the default where FA4 is not
    "ce-chunked": Kernels(cross_entropy="chunked"),
    "ce-triton": Kernels(cross_entropy="triton"),  # loss and gradient in one Triton pass (issue 27)
    "swiglu-default": Kernels(swiglu="default"),  # inductor's fusion, the default before issue 20
    "swiglu-triton": Kernels(swiglu="triton"),
    "norm-triton": Kernels(norm="triton"),  # residual add, RMSNorm and cast in one Triton pass (issue 27)
    "rope-triton": Kernels(rope="triton"),  # RoPE from the QKV output, d(qkv) whole (issue 27)
    "inductor-cd": Kernels(inductor_tuning="coordinate-descent"),
    "max-autotune": Kernels(compile_mode="max-autotune-no-cudagraphs"),
    "opt-compiled": Kernels(optimizer="compiled"),
    "opt-fused": Kernels(optimizer="fused"),  # torch._fused_adamw_, the default on CUDA before issue 20
    "opt-triton": Kernels(optimizer="triton"),
}
DEFAULT_CASES = ["baseline", "repeat", "attn-flash", "ce-chunked", "inductor-cd", "opt-compiled", "best"]
LOSS_TOL = 2e-2
WEIGHT_TOL = 0.25  # of how far the baseline's weights moved from their init
WIN = 1.01  # a choice enters "best" when at least 1% faster than the baseline
# Nondeterministic backward kernels make the rebuilt baseline drift from itself; a variant
# is not told apart from that drift unless it strays this many times further.
NOISE_FACTOR = 2.0


def judge(loss_diff: float, weight_ratio: float | None, drift: dict | None = None) -> tuple[bool, dict]:
    """Equal to the baseline: within the fixed tolerances, or within NOISE_FACTOR times the
    drift `repeat` measured (its max_loss_diff and weight_diff_ratio) when that is larger."""
    loss_tol, weight_tol = LOSS_TOL, WEIGHT_TOL
    if drift:
        loss_tol = max(loss_tol, NOISE_FACTOR * drift["max_loss_diff"])
        weight_tol = max(weight_tol, NOISE_FACTOR * drift["weight_diff_ratio"])
    equal = weight_ratio is not None and loss_diff <= loss_tol and weight_ratio < weight_tol
    return bool(equal), {
        "loss_tol": loss_tol,
        "weight_ratio_tol": weight_tol,
        "against": "repeat drift" if drift else "fixed",
    }


def free(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def initial_arena(recipe, device) -> torch.Tensor:
    """The weights every case starts from, in the arena's layout."""
    model = build_model(recipe.model, device, seed=recipe.training.seed)
    params = ArenaAdamW(model).params.clone()
    del model
    return params


def run_case(recipe, kernels: Kernels, device, opts: Protocol, check_updates: int, reference: dict | None) -> dict:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    built = build(recipe, device, kernels=kernels)
    if cuda:
        torch.cuda.synchronize()
    out = {"kernels": built.ran().record(), "backend": built.backend, "setup_seconds": time.perf_counter() - t0}
    losses = []
    for _ in range(check_updates):
        built.run()
        losses.append(built.update.loss.item())
    params = built.optimizer.params
    out["losses"] = losses
    out["weights_sum"] = params.double().sum().item()
    out["weights_norm"] = params.double().norm().item()
    if reference is None:
        reference = {"losses": losses, "params": params.clone()}
        out["equal"] = True
    else:
        loss_diff = max(abs(a - b) for a, b in zip(losses, reference["losses"]))
        weight_diff = (params - reference["params"]).norm().item()
        moved = (reference["params"] - reference["init"]).norm().item()
        ratio = weight_diff / moved if moved else None
        out.update(max_loss_diff=loss_diff, weight_diff=weight_diff, baseline_moved=moved, weight_diff_ratio=ratio)
        out["equal"], out["criterion"] = judge(loss_diff, ratio, reference.get("drift"))
    m = Measurement(tokens_per_update=recipe.training.batch_tokens)
    measure(TorchRunner(built), opts, m, updates_before=built.setup_updates + check_updates)
    rates = m.rates()
    out.update(
        tokens_per_second=statistics.median(rates),
        window_rates=rates,
        updates_per_window=m.calibration.updates_per_window,
    )
    if cuda:
        out["reserved_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
        # ArenaAdamW.step alone as its own graph, as benchmarks/peers.py times it.
        step_graph = capture(built.optimizer.step)
        out["optimizer_ms"] = statistics.median(time_replays(step_graph.replay, 20, 5))
        del step_graph
    del built, params
    return out, reference


def best_kernels(cases: dict) -> tuple[Kernels | None, list[str]]:
    """The faster-than-baseline, equal choices of this point combined (None unless two or more won)."""
    base = cases.get("baseline", {})
    if not base.get("ok"):
        return None, []

    def rate(name):
        return cases[name]["tokens_per_second"] if cases.get(name, {}).get("ok") and cases[name]["equal"] else 0.0

    winners = [
        n for n in cases if n not in ("baseline", "repeat", "best") and rate(n) >= WIN * base["tokens_per_second"]
    ]
    attention = max((n for n in winners if n.startswith("attn-")), key=rate, default=None)
    chosen = [n for n in winners if not n.startswith("attn-")] + ([attention] if attention else [])
    if len(chosen) < 2:
        return None, chosen
    k = Kernels()
    for name in chosen:
        c = CASES[name]
        k = replace(
            k,
            **{f.name: getattr(c, f.name) for f in fields(Kernels) if getattr(c, f.name) != getattr(Kernels(), f.name)},
        )
    return k, chosen


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--points", nargs="*", default=None, help="MODEL@CONTEXTxBATCH (default: the issue's five)")
    ap.add_argument("--cases", nargs="*", default=DEFAULT_CASES, choices=[*CASES, "best"])
    ap.add_argument("--quick", action="store_true", help="windows of 0.5 s x 3 (else 2 s x 5)")
    ap.add_argument("--check-updates", type=int, default=4, help="graph replays compared with the baseline")
    ap.add_argument("--budget-seconds", type=float, default=450.0, help="skip the remaining cases after this")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test (eager, no graph)")
    return ap


def _case_order(asked: list[str]) -> list[str]:
    """The baseline first, then the cases asked for, "best" last."""
    cases = [c for c in asked if c != "baseline"]
    # repeat right after the baseline: the variants after it are judged against its drift.
    return [
        "baseline",
        *(["repeat"] if "repeat" in cases else []),
        *[c for c in cases if c not in ("repeat", "best")],
        *(["best"] if "best" in cases else []),
    ]


def _add_relative_rates(out: dict, point: dict, fpt: int, peak: float | None) -> None:
    """The case's rate as a share of the GPU's peak and as a multiple of the point's baseline."""
    if peak:
        out["mfu"] = fpt * out["tokens_per_second"] / peak
    base = point["cases"].get("baseline", {})
    if base.get("ok"):
        out["ratio"] = out["tokens_per_second"] / base["tokens_per_second"]


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("variants.py: needs a CUDA GPU (or --device cpu for a smoke test)", file=sys.stderr)
        return 2
    points = args.points or (DEFAULT_POINTS if device.type == "cuda" else ["tiny@128x2"])
    cases = _case_order(args.cases)
    seconds, windows = (0.5, 3) if args.quick else (2.0, 5)
    opts = Protocol(
        warmup=3,
        calibration_updates=3,
        windows=windows,
        extra_windows=0,
        window_seconds=seconds,
        min_updates_per_window=3,
    )
    hw = hardware.collect(device)
    copy_bw = copy_bandwidth() if device.type == "cuda" else None
    peak = hardware.peak_bf16_flops(hw.gpu_name, hw.gpu_memory_bytes) if device.type == "cuda" else None
    report = {
        "hardware": {
            "gpu": hw.gpu_name,
            "memory": hw.gpu_memory_bytes,
            "torch": hw.torch,
            "cuda": hw.cuda,
            "driver": hw.driver,
        },
        "peak_bf16_flops": peak,
        "quick": args.quick,
        "check_updates": args.check_updates,
        "criteria": {"loss_abs": LOSS_TOL, "weight_ratio": WEIGHT_TOL, "repeat_drift_factor": NOISE_FACTOR},
        "copy_bytes_per_second": copy_bw,
        "command": " ".join(sys.argv),
        "points": [],
    }
    started = time.perf_counter()
    for text in points:
        model, context, batch = parse_point(text)
        recipe = recipe_for(model, context, batch)
        fpt = flops_per_token(recipe.model)
        params = parameter_count(recipe.model)
        point = {"point": text, "parameters": params, "flops_per_token": fpt, "cases": {}}
        if copy_bw:  # 32 bytes per parameter: read p, g, m, v (+ g once more for the norm), write p, m, v
            point["optimizer_floor_ms"] = 32 * params / copy_bw * 1e3
        report["points"].append(point)
        reference = None
        for name in cases:
            if time.perf_counter() - started > args.budget_seconds:
                point["cases"][name] = {"ok": False, "skipped": "budget spent"}
                continue
            kernels = CASES.get(name)
            if name == "best":
                kernels, chosen = best_kernels(point["cases"])
                if kernels is None:
                    point["cases"][name] = {"ok": False, "skipped": f"fewer than two winners: {chosen or 'none'}"}
                    continue
            elif name != "baseline" and reference is None:
                point["cases"][name] = {"ok": False, "skipped": "no baseline to compare with"}
                continue
            free(device)
            try:
                if name == "baseline":
                    init = initial_arena(recipe, device)
                out, ref = run_case(recipe, kernels, device, opts, args.check_updates, reference)
                if name == "baseline":
                    reference = {**ref, "init": init}
                if name == "repeat" and out.get("weight_diff_ratio") is not None:
                    reference["drift"] = {k: out[k] for k in ("max_loss_diff", "weight_diff_ratio")}
                    out["reference_drift"] = True
                out["ok"] = True
                if name == "best":
                    out["combines"] = chosen
                _add_relative_rates(out, point, fpt, peak)
            except Exception as exc:  # noqa: BLE001 - record and continue with the next case
                traceback.print_exc()
                text_ = str(exc).strip().splitlines()
                out = {
                    "ok": False,
                    "kernels": kernels.record(),
                    "error": f"{type(exc).__name__}: {text_[0] if text_ else ''}"[:400],
                }
            finally:
                torch._dynamo.reset()
                free(device)
            point["cases"][name] = out
            print_case(text, name, out, flush=True)
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(report, indent=2) + "\n")  # after every case: partial runs keep data
        del reference
        free(device)
    report["seconds"] = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"wrote {args.output} ({report['seconds']:.0f} s)")
    return 0


def fmt_case(c: dict) -> str:
    if not c.get("ok"):
        return c.get("skipped") and f"skipped ({c['skipped']})" or f"FAILED ({c.get('error', '')[:90]})"
    mfu = f"{c['mfu']:6.1%}" if "mfu" in c else "   n/a"
    ratio = f"{c['ratio']:.3f}x" if "ratio" in c else "1.000x"
    eq = "drift" if c.get("reference_drift") else "yes" if c["equal"] else "NO"
    detail = ""
    if "max_loss_diff" in c:
        detail = f"  loss diff {c['max_loss_diff']:.1e}, weights {c['weight_diff_ratio'] or 0:.2e} of moved"
    if "combines" in c:
        detail += f"  [{' + '.join(c['combines'])}]"
    opt = f"  optimizer {c['optimizer_ms']:.2f} ms" if "optimizer_ms" in c else ""
    return f"{c['tokens_per_second']:>12,.0f} {mfu} {ratio:>7} {eq:>5}  setup {c['setup_seconds']:5.1f} s{opt}{detail}"


def print_case(point: str, name: str, c: dict, flush=False) -> None:
    print(f"{point:>14} {name:<15} {fmt_case(c)}", flush=flush)


def print_table(report: dict) -> None:
    print(f"\n{'point':>14} {'case':<15} {'tokens/s':>12} {'MFU':>6} {'ratio':>7} {'equal':>5}")
    for p in report["points"]:
        if "optimizer_floor_ms" in p:
            print(
                f"{p['point']:>14} optimizer floor {p['optimizer_floor_ms']:.2f} ms (32 B/parameter at "
                f"{report['copy_bytes_per_second'] / 1e12:.2f} TB/s)"
            )
        for name, c in p["cases"].items():
            print_case(p["point"], name, c)


if __name__ == "__main__":
    sys.exit(main())
