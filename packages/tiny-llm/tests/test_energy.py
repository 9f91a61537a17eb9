"""Energy in the protocol and the worker, driven by a meter with planned readings.

The meter's counter rises at a planned power against the runner's controlled clock, so
every reading, interval and derived figure is known; the runner logs each call so the
tests see where the reads fall (after the sync that closes a window, no sync of their own).
"""

from pathlib import Path

import pytest

from throughput_schema import Protocol, WorkerResult, read
from throughput_schema.energy import EnergySource
from tiny_llm.energy_meter import open_meter
from tiny_llm.protocol import Measurement, measure
from tiny_llm.summary import energy_summary

OPTS = Protocol(warmup=3, windows=5, window_seconds=1.0, min_updates_per_window=2)
TOKENS = 1000
START_MJ = 7_000_000
ROOT = Path(__file__).resolve().parents[3]
TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--set", "model.vocab_size=512"]
TINY += ["--set", "training.micro_batch_size=2", "--set", "training.batch_tokens=256"]
FAST = ["--warmup", "2", "--windows", "5", "--window-seconds", "0.2", "--min-updates-per-window", "2"]
FAST += ["--device", "cpu"]


class Runner:
    """Each run(n) advances the clock by n × seconds-per-update; event reads take `event_seconds`."""

    def __init__(self, per_update=lambda i: 0.01, event_seconds=0.0):
        self.now, self.counter, self.calls = 0.0, 0, 0
        self.per_update, self.event_seconds = per_update, event_seconds
        self.log: list[str] = []

    def clock(self):
        return self.now

    def run(self, n):
        self.now += n * self.per_update(self.calls)
        self.counter += n
        self.calls += 1
        self.log.append("run")

    def sync(self):
        self.log.append("sync")

    def check(self):
        self.log.append("check")
        return True, self.counter

    def read_events(self):
        self.now += self.event_seconds
        self.log.append("events")
        return 10.0, 2.0


class PlannedMeter:
    """The counter rises at `watts` against the runner's clock; `fail_at` (the n-th read, 0-based) raises."""

    def __init__(self, runner, watts=500.0, *, fail_at=None, limit=700.0):
        self.runner, self.watts, self.fail_at, self.limit = runner, watts, fail_at, limit
        self.reads: list[tuple[float, int]] = []

    def read(self):
        if self.fail_at is not None and len(self.reads) == self.fail_at:
            self.reads.append((self.runner.now, -1))
            raise OSError("counter read failed (planned)")
        value = START_MJ + round(self.watts * self.runner.now * 1000)
        self.reads.append((self.runner.now, value))
        self.runner.log.append("energy")
        return value

    def power_limit_watts(self):
        return self.limit

    def source(self):
        return EnergySource(counter="planned test meter", device_index=3, device_name="test")


def run(runner, meter, opts=OPTS, optimizer_timing=False):
    m = Measurement(tokens_per_update=TOKENS, meter=meter)
    return measure(runner, opts, m, updates_before=0, optimizer_timing=optimizer_timing, clock=runner.clock)


def test_each_window_keeps_its_readings_and_derived_energy():
    runner = Runner()
    meter = PlannedMeter(runner, watts=500.0)
    m = run(runner, meter)
    assert len(m.windows) == 5 and not m.energy_unavailable
    # Two reads a window, nothing read during warm-up or calibration.
    assert len(meter.reads) == 10
    for i, w in enumerate(m.windows):
        e = w.energy
        (t0, start), (t1, end) = meter.reads[2 * i], meter.reads[2 * i + 1]
        assert (e.start_mj, e.end_mj) == (start, end)
        assert e.interval_seconds == pytest.approx(t1 - t0) == pytest.approx(w.seconds)
        assert e.joules == pytest.approx(500.0 * w.seconds, rel=1e-6)
        assert e.mean_watts == pytest.approx(500.0, rel=1e-6)
        assert e.joules_per_token == pytest.approx(e.joules / (w.updates * TOKENS))
    # Consecutive windows: the next start is at or after the previous end.
    assert all(a.energy.end_mj <= b.energy.start_mj for a, b in zip(m.windows, m.windows[1:]))


def test_reads_add_no_synchronisation():
    """Each window is read, run, synchronised once, read, checked: the same syncs as without a meter."""
    with_meter, without = Runner(), Runner()
    run(with_meter, PlannedMeter(with_meter))
    run(without, None)
    assert with_meter.log.count("sync") == without.log.count("sync")
    window_log = with_meter.log[with_meter.log.index("energy") :]
    assert window_log[:5] == ["energy", "run", "sync", "energy", "check"]
    assert [x for x in with_meter.log if x != "energy"] == without.log


def test_extra_windows_are_read_too():
    runner = Runner(lambda i: 0.02 if i == 4 else 0.01)  # one slow window: CV > 5%, five more
    m = run(runner, PlannedMeter(runner))
    assert len(m.windows) == 10 and all(w.energy is not None for w in m.windows)
    energy, reason = energy_summary(m, EnergySource(), optimizer_timing=False)
    assert reason == "" and energy.interval == "window"
    per_token = sorted(w.energy.joules_per_token for w in m.windows)
    assert energy.joules_per_token == pytest.approx((per_token[4] + per_token[5]) / 2)
    # The slow window used twice the energy per token at the same power.
    assert max(per_token) == pytest.approx(2 * min(per_token), rel=1e-3)


def test_optimizer_timing_reads_the_whole_span():
    """The window's seconds are its bursts' sum; the counter covers the event reads between them too."""
    runner = Runner(event_seconds=0.004)
    opts = Protocol(warmup=3, windows=5, window_seconds=1.0, min_updates_per_window=2, burst_seconds=0.1)
    m = run(runner, PlannedMeter(runner, watts=400.0), opts, optimizer_timing=True)
    assert m.bursts
    for i, w in enumerate(m.windows):
        events = sum(1 for b in m.bursts if b.window == i)
        assert events > 1
        assert w.energy.interval_seconds == pytest.approx(w.seconds + events * 0.004)
        assert w.energy.mean_watts == pytest.approx(400.0, rel=1e-5)
    energy, _ = energy_summary(m, EnergySource(), optimizer_timing=True)
    assert energy.interval == "span"
    assert energy.mean_watts == pytest.approx(400.0, rel=1e-5)


def test_no_counter_gives_no_energy_and_the_reason():
    runner = Runner()
    m = Measurement(tokens_per_update=TOKENS, energy_unavailable="no energy counter on the CPU")
    measure(runner, OPTS, m, updates_before=0, clock=runner.clock)
    assert all(w.energy is None for w in m.windows)
    assert energy_summary(m, None, optimizer_timing=False) == (None, "no energy counter on the CPU")


@pytest.mark.parametrize("fail_at, where", [(0, "at the start of window 0"), (5, "at the end of window 2")])
def test_a_meter_failing_mid_run_drops_the_energy_not_the_measurement(fail_at, where):
    runner = Runner()
    meter = PlannedMeter(runner, fail_at=fail_at)
    m = run(runner, meter)
    assert len(m.windows) == 5 and all(w.updates > 0 for w in m.windows)  # throughput measured in full
    assert all(w.energy is None for w in m.windows)  # none kept: a median over part of them is not the point's
    assert where in m.energy_unavailable and "OSError: counter read failed (planned)" in m.energy_unavailable
    assert len(meter.reads) == fail_at + 1  # no read after the failure
    energy, reason = energy_summary(m, meter.source(), optimizer_timing=False, power_limit_watts=700.0)
    assert energy is None and reason == m.energy_unavailable


def test_a_counter_going_backwards_is_kept_raw_for_the_audit():
    runner = Runner()
    meter = PlannedMeter(runner, watts=-10.0)
    m = run(runner, meter)
    assert all(w.energy.end_mj < w.energy.start_mj and w.energy.joules < 0 for w in m.windows)


def test_setup_energy_and_power_limit_in_the_summary():
    runner = Runner()
    meter = PlannedMeter(runner, watts=300.0)
    m = run(runner, meter)
    energy, reason = energy_summary(
        m,
        meter.source(),
        optimizer_timing=False,
        power_limit_watts=meter.power_limit_watts(),
        setup_mj=(1_000_000, 1_045_500),
        setup_seconds=2.5,
    )
    assert reason == ""
    assert (energy.setup_joules, energy.setup_seconds, energy.power_limit_watts) == (45.5, 2.5, 700.0)
    assert energy.source.device_index == 3
    total_j = sum(w.energy.joules for w in m.windows)
    assert energy.mean_watts == pytest.approx(total_j / sum(w.energy.interval_seconds for w in m.windows))
    no_setup, _ = energy_summary(m, meter.source(), optimizer_timing=False, setup_mj=(None, 5), setup_seconds=2.5)
    assert no_setup.setup_joules is None and no_setup.setup_seconds is None


def test_open_meter_says_why_there_is_none():
    import torch

    meter, reason = open_meter(torch.device("cpu"))
    assert meter is None and "no energy counter on the CPU" in reason
    meter, reason = open_meter(torch.device("cpu"), "off")
    assert meter is None and reason == "energy counter turned off (--energy off)"


# The worker itself on the CPU (tiny recipe): its reads around setup and the windows go
# through the same meter interface; a planned meter stands in for the GPU's counter.
def _cpu_worker(tmp_path, monkeypatch, capsys, *extra, meter_watts=None):
    import time

    import tiny_llm.worker
    from tiny_llm.cli import main

    meter = None
    if meter_watts is not None:

        class Clock:
            @property
            def now(self):
                return time.perf_counter()

            log: list[str] = []

        meter = PlannedMeter(Clock(), watts=meter_watts)
        monkeypatch.setattr(tiny_llm.worker, "open_meter", lambda device, mode: (meter, ""))
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST, *extra]) == 0
    return read(out, WorkerResult), capsys.readouterr().out, meter


def test_cpu_worker_result_says_energy_null_with_the_reason(tmp_path, monkeypatch, capsys):
    result, line, _ = _cpu_worker(tmp_path, monkeypatch, capsys)
    assert result.energy is None and "no energy counter on the CPU" in result.energy_unavailable
    assert "energy n/a (no energy counter on the CPU" in line


def test_cpu_worker_energy_off(tmp_path, monkeypatch, capsys):
    result, line, _ = _cpu_worker(tmp_path, monkeypatch, capsys, "--energy", "off")
    assert result.energy is None and result.energy_unavailable == "energy counter turned off (--energy off)"
    assert "energy n/a (energy counter turned off (--energy off))" in line


def test_cpu_worker_with_a_meter_records_windows_setup_and_summary(tmp_path, monkeypatch, capsys):
    result, line, meter = _cpu_worker(tmp_path, monkeypatch, capsys, meter_watts=250.0)
    e = result.energy
    assert e is not None and result.energy_unavailable == ""
    assert all(w.energy is not None for w in result.windows)
    # The planned meter follows the real clock, so the windows' own timing sees it within
    # scheduling jitter (a loaded CI machine can move the reads of a 0.2 s window by ms).
    joules = sum(w.energy.joules for w in result.windows)
    assert e.mean_watts == pytest.approx(joules / sum(w.energy.interval_seconds for w in result.windows))
    assert e.mean_watts == pytest.approx(250.0, rel=0.05) and e.power_limit_watts == 700.0
    # Setup is read around compile and capture: the first two reads, which bracket its seconds
    # (a loaded machine may stretch the reads themselves, so the bound is one-sided).
    (r0, _), (r1, _) = meter.reads[:2]
    assert e.setup_joules == pytest.approx(250.0 * (r1 - r0), abs=0.002)
    assert r1 - r0 >= result.setup_seconds == e.setup_seconds
    assert e.source.counter == "planned test meter" and e.interval == "window"
    assert f"energy {e.joules_per_token:.4g} J/token, {e.mean_watts:.0f} W mean, limit 700 W" in line
