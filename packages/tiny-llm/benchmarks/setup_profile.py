"""Where a worker's setup goes, finer than its phases (issue 45, part 2; GPU only).

One point's setup as the worker runs it (`tiny_llm.update.build`: the model, the arenas, the
compile, the eager updates, the capture) under cProfile, with, in order:
- imports: the seconds of each module the setup needs, imported one by one before it (torch,
  triton, the worker's update, FlashAttention-4's CuTe DSL, torchao's float8), so the lazy
  imports inside the setup cost it nothing more;
- cuda_init_s: the CUDA context and the first BF16 matrix product (cuBLAS's handle);
- phases: the setup's phases as the worker records them (`tiny_llm.setup_clock`), which the
  profiler slows by its own overhead (the total is given beside the unprofiled result's);
- by_package: the profiled setup's own seconds (tottime) summed per package of the function's
  file (torch._inductor, torch._dynamo, triton, cutlass, flash_attn, tiny_llm, ...);
- top: the functions with the most cumulative seconds.
New compiler caches by default (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR in a temporary
folder: a job on a node that never compiled the point); --keep-caches uses the environment's.

    python packages/tiny-llm/benchmarks/setup_profile.py --output runs/setup-profile.json \
        [--point 250m@2048x8] [--top 40] [--keep-caches]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import importlib
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
IMPORTS = ["torch", "triton", "tiny_llm.update", "flash_attn.cute.interface", "torchao.float8"]
PACKAGES = ["torch/_inductor", "torch/_dynamo", "torch/_functorch", "torch", "triton", "cutlass", "flash_attn"]
PACKAGES += ["torchao", "tiny_llm", "throughput_schema"]


def timed_imports() -> dict[str, float | str]:
    seconds: dict[str, float | str] = {}
    for name in IMPORTS:
        t = time.perf_counter()
        try:
            importlib.import_module(name)
        except ImportError as exc:
            seconds[name] = f"not importable: {exc}"
            continue
        seconds[name] = round(time.perf_counter() - t, 3)
    return seconds


def package_of(filename: str) -> str:
    path = filename.replace(os.sep, "/")
    for package in PACKAGES:
        if f"/{package}/" in path:
            return package.replace("/", ".")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    return "python" if path.startswith(("~", "<")) or "/lib/python" in path else "other"


def summarise(profile: cProfile.Profile, top: int) -> tuple[dict[str, float], list[dict]]:
    stats = pstats.Stats(profile)
    by_package: dict[str, float] = {}
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        package = package_of(filename)
        by_package[package] = by_package.get(package, 0.0) + tottime
        rows.append(
            {"function": f"{filename}:{line}({name})", "calls": calls, "own_s": tottime, "cumulative_s": cumtime}
        )
    rows.sort(key=lambda r: r["cumulative_s"], reverse=True)
    ordered = dict(sorted(((k, round(v, 3)) for k, v in by_package.items()), key=lambda kv: -kv[1]))
    return ordered, [
        {**r, "own_s": round(r["own_s"], 3), "cumulative_s": round(r["cumulative_s"], 3)} for r in rows[:top]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--point", default="250m@2048x8", help="MODEL@CONTEXTxBATCH (default: the guide's)")
    parser.add_argument("--top", type=int, default=40, help="how many functions by cumulative seconds")
    parser.add_argument("--keep-caches", action="store_true", help="the environment's compiler caches")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script itself")
    args = parser.parse_args()
    if not args.keep_caches:  # before torch is imported: inductor and Triton read them once
        caches = tempfile.mkdtemp(prefix="setup-profile-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{caches}/inductor"
        os.environ["TRITON_CACHE_DIR"] = f"{caches}/triton"
    sys.path[:0] = [str(ROOT / "packages" / "tiny-llm" / "benchmarks")]
    imports = timed_imports()
    import torch
    from peers import parse_point, recipe_for  # peers.py puts the sources on sys.path

    from tiny_llm.setup_clock import SetupClock
    from tiny_llm.update import build

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("setup_profile.py: needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    t = time.perf_counter()
    a = torch.ones(256, 256, device=device, dtype=torch.bfloat16)
    (a @ a).sum().item()
    cuda_init = time.perf_counter() - t
    recipe = recipe_for(*parse_point(args.point))
    clock, profile = SetupClock(), cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    built = build(recipe, device, on_phase=clock.mark)
    if device.type == "cuda":
        torch.cuda.synchronize()
    profile.disable()
    t1 = time.perf_counter()
    by_package, top = summarise(profile, args.top)
    record = {
        "point": args.point,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "kernels": dataclasses.asdict(built.ran()),
        "fresh_caches": not args.keep_caches,
        "imports_s": imports,
        "cuda_init_s": round(cuda_init, 3),
        "setup_s": round(t1 - t0, 3),
        "phases_s": {k: round(v, 3) for k, v in clock.phases(t0, t1).items()},
        "by_package_own_s": by_package,
        "top": top,
        "command": sys.argv,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.point}: setup {record['setup_s']} s profiled, phases {record['phases_s']}")
    print(f"imports {imports}, CUDA context and first product {record['cuda_init_s']} s")
    print("own seconds by package: " + ", ".join(f"{k} {v}" for k, v in list(by_package.items())[:10]))
    for row in top[:15]:
        print(f"  {row['cumulative_s']:8.2f} s cumulative  {row['own_s']:7.2f} own  {row['function'][-110:]}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
