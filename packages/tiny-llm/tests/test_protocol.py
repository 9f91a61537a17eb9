"""The protocol's arithmetic and window rule, driven with controlled times."""

import pytest

from throughput_schema import Protocol
from tiny_llm import stats
from tiny_llm.protocol import CounterMismatch, Measurement, NonFiniteState, measure


class FakeRunner:
    """Each run(n) advances a fake clock by n × the current seconds-per-update."""

    def __init__(self, per_update, *, fail_finite_at=None, counter_offset=0):
        self.now, self.counter = 0.0, 0
        self.per_update = per_update  # callable: index of the run() call -> seconds per update
        self.calls = 0
        self.fail_finite_at, self.counter_offset = fail_finite_at, counter_offset
        self.checks = 0

    def clock(self):
        return self.now

    def run(self, n):
        self.now += n * self.per_update(self.calls)
        self.counter += n
        self.calls += 1

    def sync(self):
        pass

    def check(self):
        self.checks += 1
        return self.checks != self.fail_finite_at, self.counter + self.counter_offset

    def read_events(self):
        return 10.0, 2.0 + self.calls % 2  # alternating optimizer ms: 2, 3


OPTS = Protocol(warmup=3, windows=5, window_seconds=1.0, min_updates_per_window=2)


def run(runner, opts=OPTS, before=0):
    m = Measurement(tokens_per_update=1000)
    return measure(runner, opts, m, updates_before=before, clock=runner.clock)


def test_stable_five_windows():
    m = run(FakeRunner(lambda i: 0.01))
    assert m.calibration.updates == 5 and m.calibration.updates_per_window == 100
    assert len(m.windows) == 5 and all(w.updates == 100 for w in m.windows)
    assert m.rates() == pytest.approx([100_000.0] * 5)
    assert m.cv() == 0
    # Exact counter after each window: warm-up 3 + calibration 5 + (i+1)·100.
    assert [w.counter_after for w in m.windows] == [108, 208, 308, 408, 508]


def test_cv_rule_five_then_ten_then_unstable():
    # run() calls: 0 warm-up, 1 calibration, 2..6 the first windows. One window at half
    # speed gives CV > 5% over five; five more steady windows still leave it above 5%
    # over ten (about 0.16), so the point is flagged unstable with all ten kept.
    times = {4: 0.02}
    m = run(FakeRunner(lambda i: times.get(i, 0.01)))
    assert len(m.windows) == 10
    assert stats.needs_more_windows(m.cv(), 0.05)


def test_cv_rule_extra_windows_resolve():
    # A 13% slower window: CV over five is above 5%, over ten below it -> stable after 10.
    slow = 0.01 * 1.13
    m5 = stats.sample_cv([1 / 0.01] * 4 + [1 / slow])
    m10 = stats.sample_cv([1 / 0.01] * 9 + [1 / slow])
    assert m5 > 0.05 >= m10
    m = run(FakeRunner(lambda i: slow if i == 3 else 0.01))
    assert len(m.windows) == 10
    assert m.cv() == pytest.approx(m10)
    assert not stats.needs_more_windows(m.cv(), 0.05)


def test_cv_just_under_threshold_keeps_five():
    slow = 0.01 * 1.10
    assert stats.sample_cv([1 / 0.01] * 4 + [1 / slow]) <= 0.05
    m = run(FakeRunner(lambda i: slow if i == 3 else 0.01))
    assert len(m.windows) == 5


def test_window_rates_and_median():
    m = run(FakeRunner(lambda i: [0.01, 0.01, 0.01, 0.02, 0.01, 0.01, 0.01][i] if i < 7 else 0.01))
    rates = m.rates()
    assert rates[1] == pytest.approx(50_000.0)
    assert stats.median(rates) == pytest.approx(100_000.0)


def test_calibration_choice():
    assert stats.updates_per_window(5, 0.5, 10.0, 20) == 100
    assert stats.updates_per_window(5, 5.0, 10.0, 20) == 20  # slow update: the minimum wins
    assert stats.updates_per_window(5, 0.05, 10.0, 20) == 1000
    assert stats.updates_per_window(5, 0.5, 10.0, 200) == 200
    m = run(FakeRunner(lambda i: 0.3))  # 1 s windows at 0.3 s per update: round(3.33) = 3
    assert m.calibration.updates_per_window == 3
    m = run(FakeRunner(lambda i: 2.0))
    assert m.calibration.updates_per_window == 2


def test_sample_cv_uses_n_minus_1():
    assert stats.sample_cv([1.0, 3.0]) == pytest.approx(2**0.5 / 2)
    assert stats.sample_cv([5.0]) == 0.0


def test_nonfinite_after_window_stops_and_keeps_windows():
    r = FakeRunner(lambda i: 0.01, fail_finite_at=5)  # checks: warm-up, calibration, w0, w1, w2
    m = Measurement(tokens_per_update=1000)
    with pytest.raises(NonFiniteState) as info:
        measure(r, OPTS, m, updates_before=0, clock=r.clock)
    assert info.value.window == 2 and info.value.phase == "measurement"
    assert len(m.windows) == 2


def test_counter_mismatch():
    r = FakeRunner(lambda i: 0.01, counter_offset=1)
    with pytest.raises(CounterMismatch):
        run(r)
    # The setup's eager updates are part of the expected count.
    r = FakeRunner(lambda i: 0.01, counter_offset=3)
    assert len(run(r, before=3).windows) == 5


def test_optimizer_timing_bursts_weighted():
    opts = Protocol(warmup=0, windows=5, window_seconds=1.0, min_updates_per_window=2, burst_seconds=0.3)
    r = FakeRunner(lambda i: 0.1)
    m = measure(r, opts, Measurement(tokens_per_update=10), updates_before=0, optimizer_timing=True, clock=r.clock)
    assert m.burst_updates == 3 and m.calibration.updates_per_window == 10
    w0 = [b for b in m.bursts if b.window == 0]
    assert [b.updates for b in w0] == [3, 3, 3, 1]
    # Window seconds = sum of its bursts; its optimizer ms = burst samples weighted by updates.
    assert m.windows[0].seconds == pytest.approx(sum(b.wall_seconds for b in w0))
    expected = sum(b.optimizer_ms * b.updates for b in w0) / 10
    assert m.window_optimizer_ms()[0] == pytest.approx(expected)
    assert m.window_graph_ms()[0] == pytest.approx(10.0)


def test_weighted_mean_by_hand():
    assert stats.weighted_mean([2.0, 4.0], [3, 1]) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        stats.weighted_mean([1.0], [0])


def test_mfu():
    assert stats.mfu(1000.0, 6e9, 989e12) == pytest.approx(6e12 / 989e12)
    assert stats.mfu(1000.0, 6e9, None) is None


def test_split_bursts():
    assert stats.split_bursts(10, 3) == [3, 3, 3, 1]
    assert stats.split_bursts(9, 3) == [3, 3, 3]
    assert stats.burst_size(0.001, 0.1) == 100 and stats.burst_size(1.0, 0.1) == 1
