"""A scripted stand-in for the throughput worker, for controller tests (`--worker scripted_worker`).

    python -m scripted_worker benchmark-throughput-worker --config CFG --set k=v ... \
        --output result.json --warmup 20 --windows 5 --window-seconds 10 [--optimizer-timing]

It takes the real worker's arguments and writes REAL `WorkerResult` records, but the
outcome of each point comes from a plan: the JSON file named by $SCRIPTED_WORKER_PLAN,

    {"default": "ok", "ok_seconds": 0.2,
     "points": {"20m-c512-b8": "cuda_oom", "20m-c1024-b2@1": "compile_error",
                "90m-c512-b4": {"outcome": "sleep", "seconds": 3600}}}

keyed by MODEL-cCONTEXT-bBATCH, optionally @ATTEMPT (read from the attempt-<k> folder of
--output) and/or :optimizer (optimizer-timing runs only); the most specific key wins.
Outcomes: ok, unstable (ok but CV above threshold), cuda_oom (exit 3), compile_error (4),
nonfinite (5), crash (exit 1 without a result), sleep (for timeouts), allocate (touch
`mb` MiB of host memory, for host-OOM kills).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from throughput_schema import EXIT_CODES, write_atomic
from throughput_schema.outcomes import CompileError, CudaOom, NonFinite, Ok
from throughput_schema.recipe import load_recipe, parameter_count
from throughput_schema.records import (
    BurstSample,
    Hardware,
    MemoryPeaks,
    MemoryReport,
    OptimizerTiming,
    Protocol,
    Throughput,
    Window,
    WorkerResult,
)

PLAN_ENV = "SCRIPTED_WORKER_PLAN"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def plan_for(model: str, context: int, batch: int, attempt: int | None, optimizer: bool) -> dict:
    path = os.environ.get(PLAN_ENV)
    plan = json.loads(Path(path).read_text()) if path else {}
    points = plan.get("points", {})
    base = f"{model}-c{context}-b{batch}"
    keys = []
    if optimizer:
        keys += [f"{base}@{attempt}:optimizer", f"{base}:optimizer"]
    keys += [f"{base}@{attempt}", base]
    entry = next((points[k] for k in keys if k in points), plan.get("default", "ok"))
    if isinstance(entry, str):
        entry = {"outcome": entry}
    entry.setdefault("seconds", plan.get("ok_seconds", 0.2))
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripted_worker")
    parser.add_argument("command", choices=["benchmark-throughput-worker"])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--window-seconds", type=float, default=10.0)
    parser.add_argument("--optimizer-timing", action="store_true")
    args = parser.parse_args(argv)

    recipe = load_recipe(args.config, args.overrides)
    model, context, batch = recipe.name, recipe.model.context_length, recipe.training.micro_batch_size
    found = re.search(r"attempt-(\d+)", str(args.output))
    attempt = int(found.group(1)) if found else None
    entry = plan_for(model, context, batch, attempt, args.optimizer_timing)
    outcome = entry["outcome"]
    mode = "optimizer-timing" if args.optimizer_timing else "throughput"
    protocol = Protocol(warmup=args.warmup, windows=args.windows, window_seconds=args.window_seconds)
    started = _now()
    common = dict(
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode=mode,
        backend="scripted",
        protocol=protocol,
        hardware=Hardware(hostname=os.uname().nodename, python=sys.version.split()[0]),
        started_at=started,
    )

    def fail(out, kind: str) -> int:
        result = WorkerResult(outcome=out, finished_at=_now(), exit_code=EXIT_CODES[kind], **common)
        write_atomic(args.output, result)
        return EXIT_CODES[kind]

    if outcome == "sleep":
        time.sleep(float(entry.get("seconds", 3600)))
        outcome = entry.get("then", "ok")
    if outcome == "crash":
        print("scripted crash", file=sys.stderr)
        return 1
    if outcome == "allocate":
        hog = []
        for _ in range(int(entry.get("mb", 4096)) // 64):
            block = bytearray(64 << 20)
            block[:: 4096] = b"x" * len(block[:: 4096])
            hog.append(block)
        time.sleep(30)
        return 1
    if outcome == "cuda_oom":
        return fail(CudaOom(phase="setup", message="CUDA out of memory (scripted)"), "cuda_oom")
    if outcome == "compile_error":
        return fail(CompileError(phase="compile", message="scripted compiler error"), "compile_error")
    if outcome == "nonfinite":
        return fail(NonFinite(phase="measurement", message="non-finite state (scripted)", window=0), "nonfinite")

    time.sleep(float(entry["seconds"]) if outcome in ("ok", "unstable") else 0)
    unstable = outcome == "unstable"
    tokens = batch * context
    rate = 50_000.0 * batch**0.7 * (512 / context) ** 0.3 * (0.97 if args.optimizer_timing else 1.0)
    n_windows = args.windows * (2 if unstable else 1)
    rates = [rate * (1 + (0.2 if unstable else 0.01) * ((i % 3) - 1)) for i in range(n_windows)]
    updates = max(20, int(args.window_seconds * rate / tokens))
    windows = [Window(updates=updates, seconds=updates * tokens / r, counter_after=(i + 1) * updates) for i, r in enumerate(rates)]
    window_rates = [w.updates * tokens / w.seconds for w in windows]
    median = sorted(window_rates)[len(window_rates) // 2]
    mean = sum(window_rates) / len(window_rates)
    sd = (sum((r - mean) ** 2 for r in window_rates) / (len(window_rates) - 1)) ** 0.5
    throughput = Throughput(
        tokens_per_second=median,
        sequences_per_second=median / context,
        window_tokens_per_second=window_rates,
        cv=sd / mean,
        unstable=unstable,
        update_ms=1000.0 * tokens / median,
    )
    timing = None
    if args.optimizer_timing:
        update_ms = throughput.update_ms
        opt_ms = 0.18 * update_ms
        bursts = [
            BurstSample(window=w, updates=10 + k, wall_seconds=(10 + k) * update_ms / 1000, graph_ms=update_ms * 0.98, optimizer_ms=opt_ms)
            for w in range(n_windows)
            for k in range(3)
        ]
        timing = OptimizerTiming(
            bursts=bursts,
            window_optimizer_ms=[opt_ms] * n_windows,
            window_graph_ms=[update_ms * 0.98] * n_windows,
            optimizer_ms=opt_ms,
            optimizer_cv=0.0,
            share_of_wall=0.18,
            share_of_graph=0.18 / 0.98,
        )
    mem = 200 * 2**20 + batch * context * 4096
    result = WorkerResult(
        outcome=Ok(),
        setup_seconds=0.1,
        windows=windows,
        throughput=throughput,
        optimizer_timing=timing,
        memory=MemoryReport(
            setup=MemoryPeaks(allocated_bytes=mem, reserved_bytes=int(mem * 1.1)),
            measurement=MemoryPeaks(allocated_bytes=int(mem * 1.05), reserved_bytes=int(mem * 1.15)),
            device_total_bytes=96 * 2**30,
        ),
        finished_at=_now(),
        **common,
    )
    write_atomic(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
