"""The shared argparse types: what each accepts, and the one-line reason it gives otherwise."""

from __future__ import annotations

import argparse

import pytest

from throughput_schema.argparsing import non_negative_int, positive_float, positive_int


@pytest.mark.parametrize(
    "parse, text, value",
    [(positive_int, "3", 3), (non_negative_int, "0", 0), (non_negative_int, "7", 7), (positive_float, "0.5", 0.5)],
)
def test_accepts(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize(
    "parse, text, reason",
    [
        (positive_int, "0", "0 must be positive"),
        (positive_int, "1.5", "'1.5' is not a whole number"),
        (non_negative_int, "-1", "-1 must not be negative"),
        (non_negative_int, "x", "'x' is not a whole number"),
        (positive_float, "0", "0 must be a positive number"),
        (positive_float, "nan", "nan must be a positive number"),
        (positive_float, "inf", "inf must be a positive number"),
        (positive_float, "-inf", "-inf must be a positive number"),
        (positive_float, "x", "'x' is not a number"),
    ],
)
def test_refuses_with_its_reason(parse, text, reason):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(text)
    assert str(caught.value) == reason
