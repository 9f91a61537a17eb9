"""Where the time of one complete update goes, by kernel family (GPU only).

    python packages/tiny-llm/benchmarks/profile_update.py --point 250m@2048x16 --output profile.json
    ... --kernel swiglu=default       # with other kernel choices (tiny_llm.kernels.Kernels)

Profiles the compiled update without the CUDA graph (the profiler attributes kernels
reliably outside graphs; the kernels are the same ones the graph replays) and sums
GPU kernel time per family: matrix products, attention, the optimizer, inductor's
fused kernels (norms, RoPE, SwiGLU, cross-entropy), and the rest.

For inductor's kernels it also reports the bytes each one moves (inductor's own estimate,
`kernel_num_gb`, written into each kernel's source when asked to; the sources go to a fresh
cache folder so that only this run's kernels are read) against
the copy ceiling measured in the same run, largest gap first: the time a kernel spends
beyond moving its bytes at copy speed is what fusing or rewriting it could win. Our own
Triton kernels (`own_kernel_gb`) are reported the same way, from the bytes they must move.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
from torch.profiler import ProfilerActivity, profile

KERNEL_CACHE = Path(tempfile.mkdtemp(prefix="profile-update-inductor-"))
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(KERNEL_CACHE)
META = re.compile(r"'kernel_name': '(triton_\w+)'.*?'kernel_num_gb': ([0-9.eE+-]+)")

# After TORCHINDUCTOR_CACHE_DIR is set: inductor reads it when these import torch._inductor.
from throughput_schema.recipe import load_recipe  # noqa: E402
from tiny_llm.update import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import copy_bandwidth, parse_kernels  # noqa: E402

FAMILIES = [
    ("tiny_llm triton", ("_swiglu_", "_cross_entropy_", "_add_norm_", "_rope_")),
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


def own_kernel_gb(recipe) -> dict[str, float]:
    """GB per launch of tiny_llm's Triton kernels (inductor estimates only its own), by name prefix."""
    tokens = recipe.training.micro_batch_size * recipe.model.context_length
    tensor = tokens * recipe.model.ffn_dim * 2 / 1e9  # one BF16 (N, F) tensor
    residual = tokens * recipe.model.d_model / 1e9  # elements of one (N, d_model) tensor, in G
    return {
        "_swiglu_forward": 3 * tensor,  # reads gate and up, writes h
        "_swiglu_backward": 5 * tensor,  # reads dh, gate and up, writes d(gate) and d(up)
        # reads the BF16 logits, writes their gradient (the second read of each row hits L2)
        "_cross_entropy_forward": 2 * tokens * recipe.model.vocab_size * 2 / 1e9,
        # The add's case (every launch but the first norm's and the last's backward): reads the
        # FP32 residual and the BF16 sublayer output, writes the FP32 sum and the BF16 norm.
        "_add_norm_forward": (4 + 2 + 4 + 2) * residual,
        # Reads the FP32 sum, the BF16 norm's gradient and the FP32 residual gradient, writes the
        # FP32 residual gradient and the BF16 sublayer output's.
        "_add_norm_backward": (4 + 2 + 4 + 4 + 2) * residual,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--point", default="250m@2048x16", help="MODEL@CONTEXTxBATCH")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a kernel choice, repeatable, e.g. swiglu=default (default: Kernels())",
    )
    args = ap.parse_args()
    kernels = parse_kernels(args.kernel)
    model, rest = args.point.split("@")
    context, batch = (int(x) for x in rest.split("x"))
    recipe = load_recipe(
        ROOT / "configs" / f"{model}.yaml",
        [
            f"model.context_length={context}",
            f"training.micro_batch_size={batch}",
            f"training.batch_tokens={batch * context}",
        ],
    )
    # Before compiling: inductor then records each kernel's estimated bytes on its launch.
    inductor_config.benchmark_kernel = True
    built = build(recipe, torch.device("cuda"), use_graph=False, kernels=kernels)
    for _ in range(3):
        built.update()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.updates):
            built.update()
        torch.cuda.synchronize()
    per_family: dict[str, float] = defaultdict(float)
    launches: dict[str, float] = defaultdict(float)
    top: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages():
        us = evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
        if us <= 0:
            continue
        per_family[family(evt.key)] += us / 1e3 / args.updates
        launches[family(evt.key)] += evt.count / args.updates
        top[evt.key] += us / 1e3 / args.updates
    total = sum(per_family.values())
    copy_bw = copy_bandwidth()
    # torch 2.11 saves a profile's trace once: read it here for both tables below.
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text())["traceEvents"]
    report = {
        "point": args.point,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "kernels": built.ran().record(),  # "auto" resolved: the kernels that ran
        "command": " ".join(sys.argv),
        "kernel_ms_per_update": total,
        "families_ms": dict(sorted(per_family.items(), key=lambda kv: -kv[1])),
        # GPU kernels (and copies) per update, as the CUDA graph replays them: what bounds
        # an update that is launch-bound inside the graph (20m at batch 1).
        "kernel_launches_per_update": sum(launches.values()),
        "families_launches": dict(sorted(launches.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms": dict(sorted(top.items(), key=lambda kv: -kv[1])[:25]),
        "copy_bytes_per_second": copy_bw,
        "inductor_kernels": inductor_bytes(events, args.updates, copy_bw),
        "own_kernels": inductor_bytes(events, args.updates, copy_bw, own_kernel_gb(recipe)),
    }
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{args.point}: {total:.2f} ms of GPU kernels per update (compiled, no graph), "
        f"{report['kernel_launches_per_update']:.0f} kernels"
    )
    for fam, ms in report["families_ms"].items():
        print(f"  {fam:18s} {ms:8.2f} ms  {100 * ms / total:5.1f}%  {launches[fam]:5.0f} kernels")
    kernels = report["inductor_kernels"]
    print(
        f"inductor kernels: {sum(k['ms'] for k in kernels):.2f} ms, of which "
        f"{sum(k['gap_ms'] for k in kernels if k['gap_ms'] is not None):.2f} ms beyond copy speed "
        f"({copy_bw / 1e12:.2f} TB/s); largest gaps:"
    )
    for k in kernels[:12] + report["own_kernels"]:
        frac = "?" if k["copy_fraction"] is None else f"{100 * k['copy_fraction']:.0f}%"
        print(f"  {k['ms']:7.3f} ms  {k['gb'] or 0:7.3f} GB  at {frac:>4s} of copy speed  {k['name'][:70]}")


def inductor_bytes(events: list[dict], updates: int, copy_bw: float, own: dict[str, float] | None = None) -> list[dict]:
    """Per inductor kernel (or, given `own`, per kernel whose name starts with one of its keys) in
    the profile's trace `events`: GPU time and estimated GB per update, and its gap to copy speed."""
    us: dict[str, float] = defaultdict(float)
    launched: dict[str, int] = defaultdict(int)
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "kernel" and (name.startswith("triton_") if own is None else name.startswith(tuple(own))):
            us[name] += float(e.get("dur", 0))
            launched[name] += 1
    if own is None:
        gb: dict[str, float] = {}
        for source in KERNEL_CACHE.rglob("*.py"):
            for name, num_gb in META.findall(source.read_text(errors="replace")):
                gb[name] = float(num_gb)
    else:
        gb = {name: next(v for prefix, v in own.items() if name.startswith(prefix)) for name in us}
    rows = []
    for name, total_us in us.items():
        ms = total_us / 1e3 / updates
        # A kernel may launch more than once per update; its estimate is per launch.
        launches = launched[name] / updates
        moved = gb[name] * launches if name in gb else None
        floor_ms = None if moved is None else moved * 1e9 / copy_bw * 1e3
        rows.append(
            {
                "name": name,
                "ms": ms,
                "launches": launches,
                "gb": moved,
                "copy_fraction": None if floor_ms is None or ms <= 0 else floor_ms / ms,
                "gap_ms": None if floor_ms is None else ms - floor_ms,
            }
        )
    return sorted(rows, key=lambda r: -(r["gap_ms"] if r["gap_ms"] is not None else r["ms"]))


if __name__ == "__main__":
    main()
