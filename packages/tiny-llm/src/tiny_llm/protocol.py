"""The measurement protocol, as the guide (docs/guide.md) fixes it. Its settings are the
schema's `Protocol` record (`throughput_schema.configs`), the one home of their defaults:
a campaign's request carries one, and the worker's flags are built from its fields.

After setup: `warmup` updates, then `calibration_updates` (5) timed updates choose a
fixed N updates per window targeting `window_seconds` (at least
`min_updates_per_window`). Then `windows` synchronised wall-clock windows: inside
the timer only the updates run (no disk, no host finite check); after each window
the state's finiteness and the optimizer's exact update count are checked. If the
sample CV of the window rates exceeds 5%, `extra_windows` (5) more are measured and
all count; still above 5% flags the point unstable.

Optimizer timing: each window is split into synchronised bursts of replays targeting
`burst_seconds`; after each burst (outside its timer) the three events captured in
the graph are read: they describe the burst's last replay. The window's wall time is
the sum of its bursts' times; its optimizer (graph) ms is the burst samples weighted
by burst update count. Extra windows are added when throughput or optimizer CV
exceeds the threshold.

Energy: where the measurement has a meter (`tiny_llm.energy_meter`), its counter is read
just before each window's timer starts and right after the synchronisation that closes it
(no other host synchronisation), with the wall interval between the two reads; the window
keeps the raw readings and `throughput_schema.energy.derive_window`'s figures. In optimizer
timing the reads bracket the whole span of the window's bursts, event reads included, and
the interval is that span ("span" in the result), not the sum of the bursts. A read that
fails stops the reading: the point then has no energy at all (every window's is dropped)
and `energy_unavailable` says where and why; the throughput measurement goes on.

The loop talks to a `Runner` (run N updates, synchronise, check the state, read
events) and a clock, so tests drive it with controlled times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

import msgspec

from throughput_schema import BurstSample, Calibration, Recipe, Window
from throughput_schema import Protocol as ProtocolRecord
from throughput_schema.configs import PROTOCOL_RECIPE_FIELDS, protocol_field
from throughput_schema.energy import derive_window
from tiny_llm import stats
from tiny_llm.energy_meter import Meter


class Runner(TypingProtocol):
    def run(self, updates: int) -> None: ...
    def sync(self) -> None: ...
    def check(self) -> tuple[bool, int]: ...  # (state finite, optimizer update counter)
    def read_events(self) -> tuple[float, float]: ...  # (graph ms, optimizer ms) of the last replay


class NonFiniteState(RuntimeError):
    def __init__(self, phase: str, window: int | None) -> None:
        where = f"after window {window}" if window is not None else f"after {phase}"
        super().__init__(f"non-finite optimizer state {where}")
        self.phase, self.window = phase, window


class CounterMismatch(RuntimeError):
    def __init__(self, phase: str, counter: int, expected: int) -> None:
        super().__init__(f"optimizer update counter is {counter} after {phase}, expected exactly {expected}")
        self.phase = phase


def protocol_record(recipe: Recipe, protocol: ProtocolRecord) -> ProtocolRecord:
    """The protocol a result records: the measurement settings given, with the recipe's
    optimizer settings (a recipe's own values are what the update ran with)."""
    return msgspec.structs.replace(
        protocol,
        **{
            protocol_field(section, name): getattr(getattr(recipe, section), name)
            for section, names in PROTOCOL_RECIPE_FIELDS.items()
            for name in names
        },
    )


@dataclass
class Measurement:
    """Filled as the protocol runs, so a failure still leaves every completed window."""

    tokens_per_update: int
    calibration: Calibration | None = None
    windows: list[Window] = field(default_factory=list)
    bursts: list[BurstSample] = field(default_factory=list)
    burst_updates: int = 0
    # The energy counter, read around each window; None where there is none, the reason in
    # energy_unavailable (also set, and the meter dropped, when a read fails).
    meter: Meter | None = None
    energy_unavailable: str = ""

    def read_energy(self, where: str) -> int | None:
        """The counter (millijoules), or None where there is no meter or a read failed."""
        if self.meter is None:
            return None
        try:
            return int(self.meter.read())
        except Exception as exc:  # noqa: BLE001 - a failed read ends the energy, not the measurement
            self.energy_failed(where, exc)
            return None

    def energy_failed(self, where: str, exc: BaseException) -> None:
        text = str(exc).strip().splitlines()
        self.energy_unavailable = (
            f"the energy counter failed {where} ({type(exc).__name__}: {text[0] if text else ''}); "
            "the point has no energy"
        )
        self.meter = None
        self.windows = [msgspec.structs.replace(w, energy=None) for w in self.windows]

    def rates(self) -> list[float]:
        return [stats.window_rate(w.updates, w.seconds, self.tokens_per_update) for w in self.windows]

    def cv(self) -> float:
        return stats.sample_cv(self.rates())

    def window_optimizer_ms(self) -> list[float]:
        return self._weighted("optimizer_ms")

    def window_graph_ms(self) -> list[float]:
        return self._weighted("graph_ms")

    def optimizer_cv(self) -> float:
        return stats.sample_cv(self.window_optimizer_ms())

    def _weighted(self, attr: str) -> list[float]:
        out = []
        for i in range(len(self.windows)):
            samples = [b for b in self.bursts if b.window == i]
            if samples:
                out.append(stats.weighted_mean([getattr(b, attr) for b in samples], [b.updates for b in samples]))
        return out


def measure(
    runner: Runner,
    opts: ProtocolRecord,
    measurement: Measurement,
    *,
    updates_before: int,
    optimizer_timing: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> Measurement:
    """Warm-up, calibration and windows; raises NonFiniteState / CounterMismatch."""
    expected = updates_before

    def check(phase: str, window: int | None = None) -> int:
        finite, counter = runner.check()
        if not finite:
            raise NonFiniteState(phase, window)
        if counter != expected:
            raise CounterMismatch(phase if window is None else f"window {window}", counter, expected)
        return counter

    on_phase("warmup")
    runner.run(opts.warmup)
    runner.sync()
    expected += opts.warmup
    check("warmup")

    # Calibration: part of the warm-up phase for outcomes; its time picks N.
    n = _calibrate(runner, opts, measurement, clock)
    expected += opts.calibration_updates
    check("warmup")

    on_phase("measurement")

    def window(index: int) -> None:
        nonlocal expected
        start_mj = measurement.read_energy(f"at the start of window {index}")
        if optimizer_timing:
            span_start = clock()
            seconds = _bursts(runner, measurement, index, n, clock)
            end_mj = measurement.read_energy(f"at the end of window {index}") if start_mj is not None else None
            interval = clock() - span_start
        else:
            t0 = clock()
            runner.run(n)
            runner.sync()
            seconds = clock() - t0
            end_mj = measurement.read_energy(f"at the end of window {index}") if start_mj is not None else None
            interval = clock() - t0
        expected += n
        counter = check("measurement", index)
        energy = None
        if start_mj is not None and end_mj is not None:
            try:
                energy = derive_window(start_mj, end_mj, interval, n * measurement.tokens_per_update)
            except ZeroDivisionError as exc:  # a clock that did not advance between the reads
                measurement.energy_failed(f"in window {index}", exc)
        measurement.windows.append(Window(updates=n, seconds=seconds, counter_after=counter, energy=energy))

    for i in range(opts.windows):
        window(i)
    if opts.extra_windows and unstable(measurement, opts, optimizer_timing):
        for i in range(opts.windows, opts.windows + opts.extra_windows):
            window(i)
    return measurement


def _calibrate(runner: Runner, opts: ProtocolRecord, measurement: Measurement, clock: Callable[[], float]) -> int:
    """Time the calibration updates; the updates per window (N) and per burst they give."""
    start = clock()
    runner.run(opts.calibration_updates)
    runner.sync()
    seconds = clock() - start
    n = stats.updates_per_window(opts.calibration_updates, seconds, opts.window_seconds, opts.min_updates_per_window)
    measurement.calibration = Calibration(updates=opts.calibration_updates, seconds=seconds, updates_per_window=n)
    measurement.burst_updates = stats.burst_size(seconds / opts.calibration_updates, opts.burst_seconds)
    return n


def _bursts(runner: Runner, measurement: Measurement, index: int, n: int, clock: Callable[[], float]) -> float:
    """Window `index`'s N updates in bursts, each timed with its graph and optimizer events;
    the bursts' summed wall time (the events are read outside each burst's timer)."""
    total = 0.0
    for size in stats.split_bursts(n, measurement.burst_updates):
        t0 = clock()
        runner.run(size)
        runner.sync()
        wall = clock() - t0
        total += wall
        graph_ms, optimizer_ms = runner.read_events()
        measurement.bursts.append(
            BurstSample(window=index, updates=size, wall_seconds=wall, graph_ms=graph_ms, optimizer_ms=optimizer_ms)
        )
    return total


def unstable(measurement: Measurement, opts: ProtocolRecord, optimizer_timing: bool = False) -> bool:
    """Throughput CV (and in timing mode optimizer CV) above the threshold."""
    if stats.needs_more_windows(measurement.cv(), opts.cv_threshold):
        return True
    return optimizer_timing and stats.needs_more_windows(measurement.optimizer_cv(), opts.cv_threshold)
