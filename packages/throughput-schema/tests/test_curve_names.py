"""Model names with `-` and `.`, and curve names read from their last `-c<digits>`."""

from __future__ import annotations

import pytest

from throughput_schema.curve_names import curve_name, is_curve_name, is_model_name, parse_curve_name


@pytest.mark.parametrize("model", ["20m", "smollm2-135m", "qwen2.5-0.5b", "tinyllama-1.1b", "x-c512", "a_b"])
def test_a_model_name_round_trips_through_its_curve_name(model):
    assert is_model_name(model)
    assert parse_curve_name(curve_name(model, 2048)) == (model, 2048)


@pytest.mark.parametrize("model", ["", "-x", "../20m", "a/b", "a b", "é", "20m\n"])
def test_names_that_are_no_model_names(model):
    assert not is_model_name(model)


@pytest.mark.parametrize("name", ["-c512", "-x-c512", "20m-c512\n", "20m-c05", "qwen2.5-0.5b"])
def test_names_that_are_no_curve_names(name):
    assert not is_curve_name(name)
