"""Which attempt of a point counts: the one rule the sweep, the report and compare read."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from throughput_schema import Settlement
from throughput_schema.layout import counting_attempts, is_void


def _settled(state):
    return Settlement(token="t", state=state, reason="r", decided_at="x")


@pytest.mark.parametrize(
    ("intent", "receipt", "result", "settlement", "void"),
    [
        (False, False, False, None, True),  # the folder was made, the intent never written
        (True, False, False, _settled("never-submitted"), True),
        (True, False, False, None, False),  # unsettled: it may have reached the scheduler
        (True, False, False, _settled("refused"), False),
        (True, False, False, _settled("ambiguous"), False),
        (True, True, False, None, False),
        (False, True, False, None, False),  # a receipt always counts, even with no intent
        (False, False, True, None, False),
        (True, False, True, _settled("never-submitted"), False),  # a result outweighs the settlement
    ],
)
def test_void_means_nothing_reached_the_scheduler(intent, receipt, result, settlement, void):
    assert is_void(intent=intent, receipt=receipt, result=result, settlement=settlement) is void


@dataclass(frozen=True)
class Try:
    batch: int
    number: int
    void: bool = False


def _count(attempts):
    return counting_attempts(attempts, point=lambda a: a.batch, number=lambda a: a.number, void=lambda a: a.void)


def test_the_highest_numbered_attempt_counts_in_any_order():
    tries = [Try(2, 10), Try(1, 1), Try(2, 2), Try(2, 9)]
    assert _count(tries) == {2: Try(2, 10), 1: Try(1, 1)}
    assert _count(reversed(tries)) == {2: Try(2, 10), 1: Try(1, 1)}


def test_a_void_attempt_never_counts_and_hides_nothing():
    assert _count([Try(4, 1), Try(4, 2, void=True)]) == {4: Try(4, 1)}
    assert _count([Try(4, 1, void=True)]) == {}


def test_points_come_in_the_order_their_first_counted_attempt_is_met():
    tries = [Try(8, 1, void=True), Try(1, 1), Try(8, 2), Try(1, 2)]
    assert list(_count(tries)) == [1, 8]
