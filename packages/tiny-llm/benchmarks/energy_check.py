"""The worker's window energy against NVML's power samples over the same windows (GPU only).

Runs one point through `tiny_llm.worker.run_worker`, as the worker CLI does, with the real
NVML meter wrapped so that every counter read is logged with its time, while a thread samples
the GPU's power (NVML's instant power field where the driver has it, else
`nvmlDeviceGetPowerUsage`) on the same clock. Each window's counter energy is then set against
the samples' energy over the window's interval (the trapezoid rule over the samples inside it);
the check passes when every window agrees within the tolerance (10%).

    python packages/tiny-llm/benchmarks/energy_check.py --config configs/250m.yaml \
        --set model.context_length=2048 --set training.micro_batch_size=16 \
        --set training.batch_tokens=32768 --output runs/energy-250m.json [--window-seconds 10]

Writes the worker's result to --output and the comparison beside it (`<output>.check.json`);
exits 1 when a window disagrees or there is no energy to compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "packages" / "tiny-llm" / "src"), str(ROOT / "packages" / "throughput-schema" / "src")]

import msgspec  # noqa: E402

from throughput_schema import Protocol  # noqa: E402
from throughput_schema.recipe import load_recipe  # noqa: E402
from tiny_llm.energy_meter import open_meter  # noqa: E402
from tiny_llm.worker import WorkerOptions, run_worker  # noqa: E402

TOLERANCE = 0.10


class LoggedMeter:
    """The real meter; every read is kept with its perf_counter time."""

    def __init__(self, meter) -> None:
        self.meter, self.reads = meter, []

    def read(self) -> int:
        value = self.meter.read()
        self.reads.append((time.perf_counter(), value))
        return value

    def power_limit_watts(self):
        return self.meter.power_limit_watts()

    def source(self):
        return self.meter.source()


class PowerSampler(threading.Thread):
    def __init__(self, nvml, handle, period: float) -> None:
        super().__init__(daemon=True)
        self.nvml, self.handle, self.period = nvml, handle, period
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.kind = "instant power field (NVML_FI_DEV_POWER_INSTANT)"
        if self._instant() is None:
            self.kind = "nvmlDeviceGetPowerUsage (the driver's averaged power)"

    def _instant(self) -> float | None:
        field = getattr(self.nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is None:
            return None
        (value,) = self.nvml.nvmlDeviceGetFieldValues(self.handle, [field])
        return value.value.uiVal / 1000.0 if value.nvmlReturn == self.nvml.NVML_SUCCESS else None

    def watts(self) -> float:
        if self.kind.startswith("instant"):
            instant = self._instant()
            if instant is not None:
                return instant
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), self.watts()))
            time.sleep(self.period)


def sampled_joules(samples: list[tuple[float, float]], start: float, end: float) -> tuple[float, int]:
    """Trapezoid energy over [start, end], the samples' values carried to the interval's ends."""
    inside = [(t, w) for t, w in samples if start <= t <= end]
    before = [s for s in samples if s[0] < start]
    after = [s for s in samples if s[0] > end]
    points = ([(start, before[-1][1])] if before else []) + inside + ([(end, after[0][1])] if after else [])
    joules = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(points, points[1:]))
    return joules, len(inside)


def window_times(reads: list[tuple[float, int]], start_mj: int, end_mj: int, after: int) -> tuple[int, float, float]:
    """The read log's index and times of the consecutive reads that gave one window's readings."""
    for i in range(after, len(reads) - 1):
        if reads[i][1] == start_mj and reads[i + 1][1] == end_mj:
            return i + 2, reads[i][0], reads[i + 1][0]
    raise LookupError(f"no consecutive reads {start_mj}, {end_mj} in the meter's log")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--window-seconds", type=float, default=None)
    ap.add_argument("--windows", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--sample-ms", type=float, default=10.0)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("energy_check: needs a CUDA GPU (the counter is the GPU's)", file=sys.stderr)
        return 2
    recipe = load_recipe(args.config, args.overrides)
    pairs = (("window_seconds", args.window_seconds), ("windows", args.windows), ("warmup", args.warmup))
    given = {k: v for k, v in pairs if v is not None}
    protocol = msgspec.structs.replace(Protocol(), **given)
    device = torch.device("cuda", torch.cuda.current_device())
    real, reason = open_meter(device)
    if real is None:
        print(f"energy_check: no energy counter: {reason}", file=sys.stderr)
        return 1
    logged = LoggedMeter(real)
    sampler = PowerSampler(real.nvml, real.handle, args.sample_ms / 1000.0)
    sampler.start()
    try:
        result = run_worker(
            recipe, args.output, WorkerOptions(protocol=protocol), open_energy_meter=lambda _d, _m: (logged, "")
        )
    finally:
        sampler.stop.set()
        sampler.join()

    windows = result.windows
    rows, cursor = [], 0
    for index, w in enumerate(windows):
        if w.energy is None:
            continue
        cursor, t0, t1 = window_times(logged.reads, w.energy.start_mj, w.energy.end_mj, cursor)
        joules, n = sampled_joules(sampler.samples, t0, t1)
        rows.append(
            {
                "window": index,
                "counter_joules": w.energy.joules,
                "counter_watts": w.energy.mean_watts,
                "sampled_joules": joules,
                "sampled_watts": joules / (t1 - t0),
                "samples": n,
                "interval_seconds": t1 - t0,
                "ratio": w.energy.joules / joules if joules > 0 else None,
            }
        )
    ok = bool(rows) and all(r["ratio"] is not None and abs(r["ratio"] - 1) <= TOLERANCE for r in rows)
    periods = [b[0] - a[0] for a, b in zip(sampler.samples, sampler.samples[1:])]
    check = {
        "config": args.config,
        "overrides": args.overrides,
        "result": str(args.output),
        "outcome": type(result.outcome).__name__,
        "energy": msgspec.to_builtins(result.energy),
        "energy_unavailable": result.energy_unavailable,
        "power_samples": sampler.kind,
        "sample_period_ms_median": 1000 * statistics.median(periods) if periods else None,
        "tolerance": TOLERANCE,
        "windows": rows,
        "passed": ok,
    }
    out = args.output.with_name(args.output.name + ".check.json")
    out.write_text(json.dumps(check, indent=2) + "\n")
    for r in rows:
        print(
            f"window {r['window']}: counter {r['counter_joules']:.1f} J ({r['counter_watts']:.0f} W), "
            f"samples {r['sampled_joules']:.1f} J ({r['sampled_watts']:.0f} W, {r['samples']} samples): "
            f"ratio {r['ratio']:.3f}"
        )
    print(f"energy check {'passed' if ok else 'FAILED'} (within {TOLERANCE:.0%}): {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
