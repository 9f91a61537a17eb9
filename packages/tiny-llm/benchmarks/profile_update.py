"""Where the time of one complete update goes, by kernel family (GPU only).

    python packages/tiny-llm/benchmarks/profile_update.py --point 250m@2048x16 --output profile.json

Profiles the compiled update without the CUDA graph (the profiler attributes kernels
reliably outside graphs; the kernels are the same ones the graph replays) and sums
GPU kernel time per family: matrix products, attention, the optimizer, inductor's
fused kernels (norms, RoPE, SwiGLU, cross-entropy), and the rest.

With `--bytes`, also each inductor kernel's bytes moved per update against the copy
ceiling measured in the same process, largest time above that ceiling first. The bytes
are inductor's own estimate (`kernel_num_gb`: every buffer the kernel reads or writes,
once), which it records on each launch when `benchmark_kernel` is on; the GPU kernel
links to that launch through the trace's External id.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from throughput_schema.recipe import load_recipe
from tiny_llm.update import build

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))
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


def kernel_bytes(prof, updates: int, copy_bw: float) -> list[dict]:
    """Per inductor kernel (name and hash: forward and backward may reuse a name): ms and
    bytes per update, its bandwidth, and the ms it spends above the copy ceiling."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    launches = {e["args"]["External id"]: (e["args"].get("kernel_hash", ""), e["args"]["kernel_num_gb"])
                for e in events if e.get("cat") == "cpu_op" and "kernel_num_gb" in e.get("args", {})
                and "External id" in e["args"]}
    per: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])  # (name, hash) -> [us, GB]
    for e in events:
        launch = launches.get(e.get("args", {}).get("External id")) if e.get("cat") == "kernel" else None
        if launch:
            per[(e["name"], launch[0])][0] += e["dur"]
            per[(e["name"], launch[0])][1] += launch[1]
    rows = []
    for (name, kernel_hash), (us, gb) in per.items():
        ms, moved = us / 1e3 / updates, gb * 1e9 / updates
        at_ceiling_ms = moved / copy_bw * 1e3
        rows.append({"kernel": name, "hash": kernel_hash, "ms": ms, "bytes": moved,
                     "bytes_per_second": moved / (ms / 1e3) if ms else None,
                     "of_copy_ceiling": at_ceiling_ms / ms if ms else None, "ms_above_ceiling": ms - at_ceiling_ms})
    return sorted(rows, key=lambda r: -r["ms_above_ceiling"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", default="250m@2048x16", help="MODEL@CONTEXTxBATCH")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--bytes", action="store_true", help="also each inductor kernel's bytes against the copy ceiling")
    args = ap.parse_args()
    if args.bytes:
        from torch._inductor import config as inductor_config

        inductor_config.benchmark_kernel = True  # before compiling: launches then carry kernel_num_gb
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
    # The CPU side holds each launch's kernel_num_gb (recorded as an input: record_shapes).
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if args.bytes else [ProfilerActivity.CUDA]
    with profile(activities=activities, record_shapes=args.bytes) as prof:
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
    if args.bytes:
        from peers import copy_bandwidth

        copy_bw = copy_bandwidth()
        rows = kernel_bytes(prof, args.updates, copy_bw)
        report["inductor_kernel_bytes"] = {
            "copy_bytes_per_second": copy_bw, "bytes": "inductor's estimate (kernel_num_gb)", "kernels": rows,
            "ms": sum(r["ms"] for r in rows), "ms_at_copy_ceiling": sum(r["ms"] - r["ms_above_ceiling"] for r in rows)}
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.point}: {total:.2f} ms of GPU kernels per update (compiled, no graph)")
    for fam, ms in report["families_ms"].items():
        print(f"  {fam:18s} {ms:8.2f} ms  {100 * ms / total:5.1f}%")
    if args.bytes:
        b = report["inductor_kernel_bytes"]
        if not b["kernels"]:
            print("  no kernel_num_gb in the trace: inductor's byte estimates did not reach the profiler")
        print(f"inductor kernels with bytes: {b['ms']:.2f} ms per update, {b['ms_at_copy_ceiling']:.2f} ms at the "
              f"copy ceiling ({b['copy_bytes_per_second'] / 1e12:.2f} TB/s); largest time above it:")
        for r in b["kernels"][:15]:
            print(f"  {r['kernel'][:60]:60s} {r['ms']:7.3f} ms {r['bytes'] / 1e6:9.1f} MB "
                  f"{r['of_copy_ceiling'] or 0:6.1%} of the ceiling, {r['ms_above_ceiling']:6.3f} ms above")


if __name__ == "__main__":
    main()
