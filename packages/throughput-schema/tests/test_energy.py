import math

import pytest

from throughput_schema import codec
from throughput_schema.energy import EnergySource, derive_window, kwh, summarize
from throughput_schema.results import Window


def test_a_window_derives_joules_watts_and_joules_per_token_from_its_raw_readings():
    w = derive_window(1_000_000, 1_690_000, 1.0, tokens=32_768)
    assert w.joules == pytest.approx(690.0)
    assert w.mean_watts == pytest.approx(690.0)
    assert w.joules_per_token == pytest.approx(690.0 / 32_768)


def test_a_result_takes_the_median_joules_per_token_and_the_mean_power_over_all_windows():
    windows = [
        derive_window(0, 600_000, 1.0, 1000),
        derive_window(0, 700_000, 2.0, 1000),
        derive_window(0, 900_000, 1.0, 1000),
    ]
    e = summarize(windows, EnergySource(device_index=0, device_name="NVIDIA H200"), power_limit_watts=700.0)
    assert e.joules_per_token == pytest.approx(0.7)
    assert e.mean_watts == pytest.approx(2200.0 / 4.0)


def test_windows_with_and_without_energy_round_trip_and_older_windows_decode():
    w = Window(updates=3, seconds=1.5, energy=derive_window(5, 1005, 1.5, 10))
    assert codec.decode(codec.dumps(w), Window) == w
    assert codec.decode(b'{"updates": 3, "seconds": 1.5}', Window).energy is None


def test_kwh():
    assert math.isclose(kwh(3.6e6), 1.0)
