"""A scripted stand-in for the throughput worker, for controller tests (`--worker scripted_worker`).

    python -m scripted_worker benchmark-throughput-worker --config CFG --set k=v ... \
        --output result.json --warmup 20 --windows 5 --window-seconds 10 [--optimizer-timing]
    python -m scripted_worker benchmark-throughput-worker --request request.json --output result.json

It takes the real worker's arguments and writes REAL `WorkerResult` records, but the
outcome of each point comes from a plan: the JSON file named by $SCRIPTED_WORKER_PLAN,

    {"default": "ok", "ok_seconds": 0.2,
     "points": {"20m-c512-b8": "cuda_oom", "20m-c1024-b2@1": "compile_error",
                "90m-c512-b4": {"outcome": "sleep", "seconds": 3600}}}

keyed by MODEL-cCONTEXT-bBATCH, optionally @ATTEMPT (read from the attempt-<k> folder of
--output) and/or :optimizer (optimizer-timing runs only); the most specific key wins.
Outcomes: ok, unstable (ok but CV above threshold), optimizer_unstable (ok, steady
throughput, optimizer CV above threshold), cuda_oom (exit 3), compile_error (4),
nonfinite (5), crash (exit 1 without a result), sleep (for timeouts), allocate (touch
`mb` MiB of host memory, for host-OOM kills). An entry may also set `slowdown` (the
instrumented run's wall time over the baseline's, default 1.03), and an entry or the plan
`rate` (a factor on the modelled tokens/s, default 1: a re-measurement that came out faster),
and `fill` (a file to grow until its filesystem is full before the result is written).

Energy: an entry or the plan may set `watts` (e.g. {"default": "ok", "watts": 600}, or
{"points": {"20m-c512-b8": {"outcome": "ok", "watts": 450}}}); the most specific wins. With
watts, the run has a planned meter, a counter in millijoules that rises by `watts` times the
scripted clock, read by the real protocol around setup (modelled as 0.1 s) and every window;
the result's energy comes from `tiny_llm.summary.energy_summary` as in the real worker: raw
readings per window, median joules per token, mean power, setup energy, `power_limit_watts`
(entry or plan, default 700), the "span" interval with --optimizer-timing. The source names
this test meter, never NVML. Without watts (or with `--energy off`) the result has energy
None and `energy_unavailable` gives the reason, as on the CPU; so do failed points.

With --request, a measured point keeps a one-line "compiled" artifact in the request's folders
as the real worker keeps its own (`tiny_llm.compile_cache`): cold first, warm for the same key.

Records have the real worker's shape and arithmetic, but never pass for a measurement:
each names this module as its worker, and its hardware fields say it is a scripted test
worker, naming no real GPU (so it has no MFU). The
measurement runs the real protocol (`tiny_llm.protocol.measure`: warm-up, calibration,
windows, bursts, exact counter checks, extra windows on CV) against a scripted runner
whose clock advances by a modelled time per update instead of sleeping, and the derived
figures come from `tiny_llm.summary`, as in `tiny_llm.worker`. So the result has a
calibration record, counters after windows of setup_updates + warm-up + calibration +
the windows' updates, bursts that add up to each window's updates, and (with
--optimizer-timing) `bursts.jsonl` beside the result. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from throughput_schema import EXIT_CODES, WorkerRequest, read, write_atomic
from throughput_schema.argparsing import STORAGE_ERRNOS
from throughput_schema.compile_cache import CompileCache
from throughput_schema.energy import EnergySource
from throughput_schema.muon import ownership
from throughput_schema.node_local import not_written
from throughput_schema.outcomes import CompileError, CudaOom, NonFinite, Ok
from throughput_schema.recipe import load_recipe, parameter_count
from throughput_schema.records import Hardware, MemoryPeaks, MemoryReport, WorkerIdentity, WorkerResult
from throughput_schema.results import JOB_STARTED_AT_ENV
from tiny_llm.compile_cache import cache_key, folders_for, kept_without_compiler
from tiny_llm.protocol import Measurement, NonFiniteState, measure, protocol_record
from tiny_llm.summary import energy_summary, optimizer_summary, throughput_summary, write_bursts
from tiny_llm.worker_cli import DEFAULT, PROTOCOL_FLAGS

PLAN_ENV = "SCRIPTED_WORKER_PLAN"
SCRIPTED_WORKER_VERSION = "test"
# The real worker's CUDA-graph build runs this many eager updates before capture.
SETUP_UPDATES = 3
GIB = 1024**3
# What the hardware fields say: a test double, never a GPU a reader could mistake for
# the one that ran (the size is only the modelled capacity of the memory figures).
TEST_HARDWARE = "scripted test worker (no GPU)"
HARDWARE_GPU = (TEST_HARDWARE, int(140.4 * GIB))
SCRIPTED_GPU_UUID = "GPU-00000000-0000-0000-0000-5c41f7ed0001"
SCRIPTED_METER = "scripted test meter"
NO_WATTS = "no energy counter: the scripted test worker's plan gives no watts"
# The scripted counter's reading when the run starts (a real counter counts from driver load).
METER_START_MJ = 5_000_000_000
SETUP_SECONDS = 0.1
# The setup split as the real worker splits it (tiny_llm.setup_clock), adding up to SETUP_SECONDS.
SETUP_PHASES = {"build": 0.02, "trace": 0.015, "compile": 0.04, "first_run": 0.015, "capture": 0.01}
STARTUP_SECONDS = 0.05


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    entry = dict(entry)
    entry.setdefault("seconds", plan.get("ok_seconds", 0.2))
    entry.setdefault("rate", plan.get("rate", 1.0))
    for key in ("watts", "power_limit_watts"):
        if key not in entry and key in plan:
            entry[key] = plan[key]
    return entry


class ScriptedRunner:
    """The protocol's Runner with modelled times: each run(n) advances the clock by n updates.

    The window index is the number of checks so far minus two (warm-up and calibration are
    checked first), so every window keeps one seconds-per-update, varied by `wobble` from
    window to window; the optimizer's event samples vary from burst to burst too, so the
    burst weighting matters.
    """

    def __init__(self, per_update: float, *, wobble: float, opt_wobble: float, nonfinite_window: int | None) -> None:
        self.now = 0.0
        self.counter = SETUP_UPDATES
        self.per_update, self.wobble, self.opt_wobble = per_update, wobble, opt_wobble
        self.nonfinite_window = nonfinite_window
        self.checks = 0
        self.runs_in_window = 0
        self.last = 0.0

    @property
    def window(self) -> int:
        return self.checks - 2

    def _factor(self, wobble: float) -> float:
        return 1.0 + (wobble * ((self.window % 3) - 1) if self.window >= 0 else 0.0)

    def clock(self) -> float:
        return self.now

    def run(self, updates: int) -> None:
        self.last = self.per_update * self._factor(self.wobble)
        self.now += updates * self.last
        self.counter += updates
        self.runs_in_window += 1

    def sync(self) -> None:
        pass

    def check(self) -> tuple[bool, int]:
        finite = self.window != self.nonfinite_window
        self.checks += 1
        self.runs_in_window = 0
        return finite, self.counter

    def read_events(self) -> tuple[float, float]:
        """(graph ms, optimizer ms) of the burst's last replay."""
        graph_ms = 1000.0 * self.last * 0.98
        k = self.runs_in_window
        optimizer_ms = 0.18 * 1000.0 * self.per_update * self._factor(self.opt_wobble) * (1 + 0.01 * (k % 3))
        return graph_ms, optimizer_ms


class ScriptedMeter:
    """The protocol's meter with planned power: millijoules = start + watts × the scripted clock."""

    def __init__(self, runner: ScriptedRunner, watts: float, power_limit: float) -> None:
        self.runner, self.watts, self.limit = runner, watts, power_limit

    def read(self) -> int:
        return METER_START_MJ + round(self.watts * self.runner.now * 1000.0)

    def power_limit_watts(self) -> float | None:
        return self.limit

    def source(self) -> EnergySource:
        return EnergySource(counter=SCRIPTED_METER, device_index=0, device_name=TEST_HARDWARE)


def _parser() -> argparse.ArgumentParser:
    """The real worker's command line, as far as the scripted points read it."""
    parser = argparse.ArgumentParser(prog="scripted_worker")
    parser.add_argument("command", choices=["benchmark-throughput-worker"])
    parser.add_argument("--config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--request", type=Path)
    parser.add_argument("--output", required=True, type=Path)
    for name in PROTOCOL_FLAGS:  # the real worker's flags, with the protocol record's defaults
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(getattr(DEFAULT, name)), default=getattr(DEFAULT, name)
        )
    parser.add_argument("--optimizer-timing", action="store_true")
    parser.add_argument("--energy", choices=("auto", "off"), default="auto")
    return parser


def _recipe_and_protocol(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The point to measure: from the request where one is given, else from the config and flags."""
    if args.request is not None:
        # As the real worker: the request's recipe and protocol, nothing from the flags.
        request = read(args.request, WorkerRequest)
        return request.recipe, request.protocol
    if args.config:
        recipe = load_recipe(args.config, args.overrides)
        return recipe, msgspec.structs.replace(DEFAULT, **{name: getattr(args, name) for name in PROTOCOL_FLAGS})
    parser.error("give --config or --request")


def scripted_cache(request: Path | None, recipe, hw: Hardware) -> CompileCache | None:
    """The compile cache in the request's folders (None without a request)."""
    if request is None:
        return None
    r, key = read(request, WorkerRequest), cache_key(recipe, {}, hw, "scripted")
    folders = folders_for(None, r.compile_cache, r.compile_cache_read, r.campaign)
    return kept_without_compiler(folders, key, lambda: f"scripted compile for {key.digest()}\n".encode())


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    recipe, opts = _recipe_and_protocol(parser, args)
    model, context, batch = recipe.name, recipe.model.context_length, recipe.training.micro_batch_size
    found = re.search(r"attempt-(\d+)", str(args.output))
    attempt = int(found.group(1)) if found else None
    entry = plan_for(model, context, batch, attempt, args.optimizer_timing)
    no_counter = NO_WATTS
    if args.energy == "off":
        entry.pop("watts", None)
        no_counter = "energy counter turned off (--energy off)"
    outcome = entry["outcome"]
    mode = "optimizer-timing" if args.optimizer_timing else "throughput"
    protocol = protocol_record(recipe, opts)
    hw = Hardware(
        gpu_name=HARDWARE_GPU[0],
        gpu_memory_bytes=HARDWARE_GPU[1],
        gpu_count=1,
        gpu_uuid=SCRIPTED_GPU_UUID,
        python=sys.version.split()[0],
        hostname=os.uname().nodename,
        cpu=TEST_HARDWARE,
        cpu_count=os.cpu_count() or 0,
        platform=TEST_HARDWARE,
    )
    started = _now()
    common = dict(
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode=mode,
        backend="scripted",
        protocol=protocol,
        hardware=hw,
        started_at=started,
        job_started_at=os.environ.get(JOB_STARTED_AT_ENV, ""),
        worker=WorkerIdentity(module="scripted_worker", version=SCRIPTED_WORKER_VERSION),
    )
    mem = 200 * 2**20 + batch * context * 4096
    setup_peaks = MemoryPeaks(allocated_bytes=mem, reserved_bytes=int(mem * 1.1))

    def fail(out, kind: str, **extra) -> int:
        reason = no_counter if "watts" not in entry else f"the point was not measured to the end ({kind})"
        result = WorkerResult(
            outcome=out, finished_at=_now(), exit_code=EXIT_CODES[kind], energy_unavailable=reason, **common, **extra
        )
        return publish(args.output, result, entry) or EXIT_CODES[kind]

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
            block[::4096] = b"x" * len(block[::4096])
            hog.append(block)
        time.sleep(30)
        return 1
    if outcome == "cuda_oom":
        return fail(CudaOom(phase="setup", message="CUDA out of memory (scripted)"), "cuda_oom")
    if outcome == "compile_error":
        return fail(CompileError(phase="compile", message="scripted compiler error"), "compile_error")

    time.sleep(float(entry["seconds"]) if outcome in ("ok", "unstable", "optimizer_unstable") else 0)
    tokens = batch * context
    rate = 50_000.0 * batch**0.7 * (512 / context) ** 0.3 * float(entry["rate"])
    if args.optimizer_timing:
        rate /= float(entry.get("slowdown", 1.03))
    runner = ScriptedRunner(
        tokens / rate,
        wobble=0.2 if outcome == "unstable" else 0.01,
        opt_wobble=0.2 if outcome == "optimizer_unstable" else 0.01,
        nonfinite_window=0 if outcome == "nonfinite" else None,
    )
    meter = None
    if "watts" in entry:
        meter = ScriptedMeter(runner, float(entry["watts"]), float(entry.get("power_limit_watts", 700.0)))
    measurement = Measurement(
        tokens_per_update=tokens, meter=meter, energy_unavailable="" if meter is not None else no_counter
    )
    # Setup (compile and capture), read as the real worker reads it.
    setup_start = measurement.read_energy("before setup")
    runner.now += SETUP_SECONDS
    setup_mj = (setup_start, measurement.read_energy("after setup"))
    memory = MemoryReport(setup=setup_peaks, device_total_bytes=hw.gpu_memory_bytes)
    try:
        measure(
            runner,
            opts,
            measurement,
            updates_before=SETUP_UPDATES,
            optimizer_timing=args.optimizer_timing,
            clock=runner.clock,
        )
    except NonFiniteState as exc:
        return fail(
            NonFinite(phase=exc.phase, window=exc.window, message=str(exc)),
            "nonfinite",
            setup_seconds=SETUP_SECONDS,
            setup_updates=SETUP_UPDATES,
            calibration=measurement.calibration,
            windows=list(measurement.windows),
            memory=memory,
        )
    timing = optimizer_summary(measurement, opts, separate_step_ms=None) if args.optimizer_timing else None
    energy, energy_unavailable = energy_summary(
        measurement,
        meter.source() if meter is not None else None,
        optimizer_timing=args.optimizer_timing,
        power_limit_watts=meter.power_limit_watts() if meter is not None else None,
        setup_mj=setup_mj,
        setup_seconds=SETUP_SECONDS,
    )
    result = WorkerResult(
        outcome=Ok(),
        setup_seconds=SETUP_SECONDS,
        setup_phases=SETUP_PHASES,
        startup_seconds=STARTUP_SECONDS,
        compile_cache=scripted_cache(args.request, recipe, hw),
        optimizer_owned=ownership(recipe.optimizer, recipe.model),  # as the worker records it
        calibration=measurement.calibration,
        windows=list(measurement.windows),
        throughput=throughput_summary(measurement, recipe, opts, hw),
        optimizer_timing=timing,
        memory=MemoryReport(
            setup=setup_peaks,
            measurement=MemoryPeaks(allocated_bytes=int(mem * 1.05), reserved_bytes=int(mem * 1.15)),
            device_total_bytes=hw.gpu_memory_bytes,
        ),
        finished_at=_now(),
        setup_updates=SETUP_UPDATES,
        energy=energy,
        energy_unavailable=energy_unavailable,
        **common,
    )
    return publish(args.output, result, entry, timing)


def publish(output: Path, result: WorkerResult, entry: dict, timing=None) -> int:
    """Write the result as the real worker does (0), or, where the filesystem refuses it, keep
    it on the node and return the storage_full status. A `"fill": PATH` entry first grows the
    file PATH until its filesystem is full (a scratch space filling up under the job)."""
    if entry.get("fill"):
        fill_filesystem(Path(entry["fill"]))
    try:
        if timing is not None:
            write_bursts(output, timing)
        write_atomic(output, result)
    except OSError as exc:
        print(f"scripted_worker: {not_written(exc, output, result)}", file=sys.stderr)
        return EXIT_CODES["storage_full"]
    return 0


def fill_filesystem(path: Path) -> None:
    """`path` grown until its filesystem is full."""
    with open(path, "ab") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise


if __name__ == "__main__":
    sys.exit(main())
