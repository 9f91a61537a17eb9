"""Where the time of one complete update goes, by kernel family (GPU only).

    python packages/tiny-llm/benchmarks/profile_update.py --point 250m@2048x16 --output profile.json

Profiles the compiled update without the CUDA graph (the profiler attributes kernels
reliably outside graphs; the kernels are the same ones the graph replays) and sums
GPU kernel time per family: matrix products, attention, the optimizer, inductor's
fused kernels (norms, RoPE, SwiGLU, cross-entropy), and the rest.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from throughput_schema.recipe import load_recipe
from tiny_llm.update import build

ROOT = Path(__file__).resolve().parents[3]
FAMILIES = [
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_")),
    ("optimizer", ("fused_adamw", "multi_tensor", "adam")),
    ("inductor fused", ("triton_",)),
    ("reductions", ("reduce", "norm")),
    ("copies and fills", ("copy", "memcpy", "memset", "fill", "elementwise")),
]


def family(name: str) -> str:
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", default="250m@2048x16", help="MODEL@CONTEXTxBATCH")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--output", type=Path, required=True)
    args = ap.parse_args()
    model, rest = args.point.split("@")
    context, batch = (int(x) for x in rest.split("x"))
    recipe = load_recipe(
        ROOT / "configs" / f"{model}.yaml",
        [f"model.context_length={context}", f"training.micro_batch_size={batch}", f"training.batch_tokens={batch * context}"],
    )
    built = build(recipe, torch.device("cuda"), use_graph=False)
    for _ in range(3):
        built.update()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.updates):
            built.update()
        torch.cuda.synchronize()
    per_family: dict[str, float] = defaultdict(float)
    top: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages():
        us = evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
        if us <= 0:
            continue
        per_family[family(evt.key)] += us / 1e3 / args.updates
        top[evt.key] += us / 1e3 / args.updates
    total = sum(per_family.values())
    report = {
        "point": args.point,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "kernel_ms_per_update": total,
        "families_ms": dict(sorted(per_family.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms": dict(sorted(top.items(), key=lambda kv: -kv[1])[:25]),
    }
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.point}: {total:.2f} ms of GPU kernels per update (compiled, no graph)")
    for fam, ms in report["families_ms"].items():
        print(f"  {fam:18s} {ms:8.2f} ms  {100 * ms / total:5.1f}%")


if __name__ == "__main__":
    main()
