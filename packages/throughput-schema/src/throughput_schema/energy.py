"""Energy the GPU's own counter measured: the raw readings of a window, a result's summary,
and the arithmetic every reader derives from them (joules, watts, kWh).

Only what the hardware counted is recorded: where there is no counter a result's energy is
None and `WorkerResult.energy_unavailable` says why; nothing is estimated from a rated power.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Literal

import msgspec

from throughput_schema.configs import NonNegFloat, NonNegInt, PositiveFloat

JOULES_PER_KWH = 3.6e6
COUNTER_NVML = "nvml total energy"


class WindowEnergy(msgspec.Struct, frozen=True, kw_only=True):
    """The counter read at a window's start and end (millijoules, as NVML gives them) and the
    wall interval between the two reads; the rest is derived from those three and the
    window's tokens (`derive_window`), and the audit derives it again."""

    start_mj: NonNegInt
    # Not held >= start_mj here: a counter that went backwards must reach the audit.
    end_mj: NonNegInt
    interval_seconds: PositiveFloat
    joules: float
    mean_watts: float
    joules_per_token: float


class EnergySource(msgspec.Struct, frozen=True, kw_only=True):
    counter: str = COUNTER_NVML
    device_index: NonNegInt = 0
    device_name: str = ""
    # What the driver says the counter covers, where it says so ("" where it does not).
    covers: str = ""


class Energy(msgspec.Struct, frozen=True, kw_only=True):
    """A result's energy: the median window's joules per token and the windows' mean power."""

    source: EnergySource
    # Not bounded here (nor setup_joules): a wrong figure must reach the audit, not fail to decode.
    joules_per_token: float
    # The windows' joules over the windows' intervals (not a mean of means).
    mean_watts: float
    power_limit_watts: PositiveFloat | None = None
    # Compile and capture, read around setup; None where setup was not read.
    setup_joules: float | None = None
    setup_seconds: NonNegFloat | None = None
    # "window": a window's interval is its timed wall clock. "span": optimizer timing, where a
    # window's time is the sum of its bursts and leaves out the event reads between them,
    # while the counter covers the whole span: power is over the span.
    interval: Literal["window", "span"] = "window"


def derive_window(start_mj: int, end_mj: int, interval_seconds: float, tokens: int) -> WindowEnergy:
    joules = (end_mj - start_mj) / 1000.0
    return WindowEnergy(
        start_mj=start_mj,
        end_mj=end_mj,
        interval_seconds=interval_seconds,
        joules=joules,
        mean_watts=joules / interval_seconds,
        joules_per_token=joules / tokens,
    )


def summarize(
    windows: Sequence[WindowEnergy],
    source: EnergySource,
    *,
    power_limit_watts: float | None = None,
    setup_joules: float | None = None,
    setup_seconds: float | None = None,
    interval: Literal["window", "span"] = "window",
) -> Energy:
    """The result's energy from its windows' (`windows` must not be empty)."""
    return Energy(
        source=source,
        joules_per_token=median(w.joules_per_token for w in windows),
        mean_watts=sum(w.joules for w in windows) / sum(w.interval_seconds for w in windows),
        power_limit_watts=power_limit_watts,
        setup_joules=setup_joules,
        setup_seconds=setup_seconds,
        interval=interval,
    )


def kwh(joules: float) -> float:
    return joules / JOULES_PER_KWH


def counted_joules(windows: Sequence[WindowEnergy], setup_joules: float | None) -> float:
    """What the counter measured of one result: its windows' joules and its setup's (0 where
    setup was not read); the rest of the job (start-up, teardown, idle) is not counted."""
    return sum(w.joules for w in windows) + (setup_joules or 0.0)
