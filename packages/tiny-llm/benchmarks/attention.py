"""Causal SDPA forward and backward: each backend and layout, and grouped-query attention (GPU only).

    python packages/tiny-llm/benchmarks/attention.py --output attention.json
    python packages/tiny-llm/benchmarks/attention.py --gqa 15:5:64 14:2:64 32:8:64 16:8:128 \
        --contexts 2048 --layouts model --backends auto repeat flash cudnn efficient --output gqa.json

For each context (512 to 4096, at 32768 tokens per call, as 250m@2048x16 and 250m@4096x8
run) and head count (15: 250m; 20: 500m), times `F.scaled_dot_product_attention(q, k, v,
is_causal=True)` forward alone and forward + backward, with CUDA events over repeated
calls, for each backend torch offers (cuDNN, FlashAttention-2, memory-efficient) and two
layouts:
- "model": q, k and v are views of one (B, T, 3, H, D) projection output transposed to
  (B, H, T, D), and the output's gradient arrives as the transpose of a (B, T, H, D)
  tensor: what `tiny_llm.model.Attention` hands the kernel;
- "bhtd": every tensor contiguous in (B, H, T, D).
Rates are causal FLOPs (forward 2·B·H·T²·D, backward 2.5 times that) per second. Each
backend's output and gradients are compared with cuDNN's on the same inputs
(`max_abs_diff`), so a faster backend that computes something else shows.

`--gqa HEADS:KV_HEADS:HEAD_DIM ...` times grouped-query shapes instead, as the model hands them
over (`enable_gqa=True`, k and v with KV_HEADS heads, never repeated), the "model" layout
being views of one (B, T, (H + 2·KV)·D) projection output. Two more backends: "auto"
(PyTorch's own choice, as the model runs by default) and "repeat" (k and v repeated to H heads
with `repeat_interleave`, then "auto": what enable_gqa saves). For "auto" and "repeat" the
attention kernels that ran, read with the profiler, are recorded (`kernels`), so the backend
PyTorch picks for grouped heads is named, not guessed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
CHOSEN = ("auto", "repeat")  # PyTorch's choice: k and v as they are, or repeated first
TOKENS = 32768
HEAD_DIM = 64


def gqa_inputs(batch: int, heads: int, kv: int, dim: int, context: int, layout: str, gen: torch.Generator):
    """q (B, H, T, D), k and v (B, KV, T, D): views of one [q | k | v] projection, or dense."""
    qkv = torch.randn((batch, context, (heads + 2 * kv) * dim), device="cuda", generator=gen, dtype=torch.bfloat16)
    dout = torch.randn((batch, context, heads, dim), device="cuda", generator=gen, dtype=torch.bfloat16)
    q, k, v = (
        t.view(batch, context, -1, dim).transpose(1, 2) for t in qkv.split([heads * dim, kv * dim, kv * dim], -1)
    )
    if layout == "bhtd":
        return q.contiguous(), k.contiguous(), v.contiguous(), dout.transpose(1, 2).contiguous()
    return q, k, v, dout.transpose(1, 2)


def inputs(batch: int, heads: int, context: int, layout: str, gen: torch.Generator):
    shape = (batch, context, 3, heads, HEAD_DIM)
    qkv = torch.randn(shape, device="cuda", generator=gen, dtype=torch.bfloat16)
    dout = torch.randn((batch, context, heads, HEAD_DIM), device="cuda", generator=gen, dtype=torch.bfloat16)
    if layout == "bhtd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in qkv.unbind(2))
        return q, k, v, dout.transpose(1, 2).contiguous()
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    return q, k, v, dout.transpose(1, 2)


def timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def one(backend: str, q, k, v, dout, reps: int) -> dict:
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grouped = k.shape[1] != q.shape[1]
    group = q.shape[1] // k.shape[1]

    def attend():
        if backend == "repeat":  # what enable_gqa saves: k and v materialised at H heads
            kk, vv = (t.repeat_interleave(group, dim=1) for t in (k, v))
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped)

    def fwd_bwd():
        return torch.autograd.grad(attend(), (q, k, v), dout)

    with sdpa_kernel([BACKENDS[backend]]) if backend in BACKENDS else contextlib.nullcontext():
        out = attend()
        grads = torch.autograd.grad(out, (q, k, v), dout)
        fwd_ms = timed(attend, reps)
        both_ms = timed(fwd_bwd, reps)
        ran = kernels_run(fwd_bwd) if backend in CHOSEN else None
    result = {"forward_ms": fwd_ms, "backward_ms": both_ms - fwd_ms, "outputs": (out.detach(), *grads)}
    if ran is not None:
        result["kernels"] = ran
    return result


def kernels_run(fn) -> list[str]:
    """The attention kernels one call of `fn` launches, by name (the profiler's CUDA events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    keys = ("attn", "attention", "fmha", "flash", "cudnn", "sdpa", "softmax")
    return sorted(n[:160] for n in names if any(key in n.lower() for key in keys))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--contexts", type=int, nargs="*", default=[512, 1024, 2048, 4096])
    ap.add_argument("--heads", type=int, nargs="*", default=[15, 20])
    ap.add_argument("--layouts", nargs="*", default=["model", "bhtd"], choices=["model", "bhtd"])
    ap.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=[*BACKENDS, *CHOSEN])
    ap.add_argument("--gqa", nargs="*", default=[], metavar="H:KV:D",
                    help="grouped-query shapes (heads:kv_heads:head_dim) instead of --heads at head dim 64")  # fmt: skip
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("attention.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    report = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "tokens": TOKENS,
        "head_dim": HEAD_DIM,
        "command": " ".join(sys.argv),
        "rows": [],
    }
    print(
        f"{'T':>5} {'H/KV':>7} {'D':>3} {'layout':>6} {'backend':>9} {'fwd ms':>8} {'bwd ms':>8} {'fwd TF/s':>8} "
        f"{'bwd TF/s':>8} {'max diff vs first':>18} kernels"
    )
    # (heads, kv heads, head dim); plain multi-head shapes unless --gqa names grouped ones.
    shapes = [tuple(int(x) for x in g.split(":")) for g in args.gqa] or [(h, h, HEAD_DIM) for h in args.heads]
    for context in args.contexts:
        batch = TOKENS // context
        for heads, kv, dim in shapes:
            flops = 2 * batch * heads * context * context * dim  # causal: half of 4·B·H·T²·D
            for layout in args.layouts:
                gen = torch.Generator("cuda").manual_seed(0)
                if args.gqa:
                    q, k, v, dout = gqa_inputs(batch, heads, kv, dim, context, layout, gen)
                else:
                    q, k, v, dout = inputs(batch, heads, context, layout, gen)
                reference = None  # the first backend that runs (cuDNN where it does)
                for backend in ["cudnn", *[b for b in args.backends if b != "cudnn"]]:
                    row = {"context": context, "batch": batch, "heads": heads, "layout": layout, "backend": backend}
                    if args.gqa:
                        row.update(kv_heads=kv, head_dim=dim)
                    try:
                        r = one(backend, q, k, v, dout, args.reps)
                        outs = r.pop("outputs")
                        if reference is None:
                            reference = outs
                        row.update(
                            r,
                            forward_tflops=flops / r["forward_ms"] / 1e9,
                            backward_tflops=2.5 * flops / r["backward_ms"] / 1e9,
                            max_abs_diff=max(
                                (a.float() - b.float()).abs().max().item() for a, b in zip(outs, reference)
                            ),
                        )
                        print(
                            f"{context:>5} {heads:>3}/{kv:<3} {dim:>3} {layout:>6} {backend:>9} {r['forward_ms']:8.3f} "
                            f"{r['backward_ms']:8.3f} {row['forward_tflops']:8.0f} {row['backward_tflops']:8.0f} "
                            f"{row['max_abs_diff']:18.2e} {' '.join(r.get('kernels', []))[:200]}",
                            flush=True,
                        )
                    except Exception as exc:  # noqa: BLE001 - a backend that refuses is recorded
                        traceback.print_exc(limit=1)
                        row["error"] = (
                            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
                        )
                    report["rows"].append(row)
                    args.output.write_text(json.dumps(report, indent=2) + "\n")
                del q, k, v, dout, reference
                torch.cuda.empty_cache()
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
