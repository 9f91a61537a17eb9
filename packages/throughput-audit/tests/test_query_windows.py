"""The windows of the audit's sacct queries by name: few, none wider than the span, around
the intents' times only; and the tokens each window's sacct calls name."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from campaign_builder.auditing import edit
from campaign_builder.fake_sacct import FakeSacct
from throughput_audit import cli, slurm
from throughput_audit.audit import run_audit
from throughput_audit.query_windows import DEFAULT_SPAN, SKEW_MARGIN, around, parse_span
from throughput_slurm.sacct import Window, windows

T = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
DAY = timedelta(days=1)


def at(*offsets: timedelta) -> list[tuple[datetime, datetime]]:
    return [around((T + o).isoformat()) for o in offsets]


def spans(found: list[Window]) -> list[tuple[timedelta, timedelta]]:
    return [(w.start - T, w.end - T) for w in found]


def test_an_intent_time_gets_the_skew_margin_in_whole_seconds():
    assert around("2026-11-20T12:00:00.250+00:00") == (T - SKEW_MARGIN, T + SKEW_MARGIN + timedelta(seconds=1))
    # With an offset it is that zone's time; without one, UTC (as the controller writes it).
    assert around("2026-11-20T14:00:00+02:00") == around("2026-11-20T12:00:00") == (T - H, T + H)
    with pytest.raises(ValueError):
        around("yesterday")


def test_intents_close_together_share_one_window():
    assert windows([]) == []
    assert spans(windows(at(timedelta(0)))) == [(-H, H)]
    assert spans(windows(at(timedelta(0), timedelta(minutes=10), timedelta(minutes=5)))) == [
        (-H, H + timedelta(minutes=10))
    ]


def test_a_gap_is_covered_when_that_saves_a_window():
    # Intents at 12:00 and 20:00: one window of 10 hours rather than two of 2.
    assert spans(windows(at(timedelta(0), 8 * H))) == [(-H, 9 * H)]


def test_intents_days_apart_get_a_window_each_and_nothing_in_between():
    found = windows(at(-5 * DAY, -3 * DAY + 30 * timedelta(minutes=1), -3 * DAY, timedelta(0)))
    assert spans(found) == [(-5 * DAY - H, -5 * DAY + H), (-3 * DAY - H, -3 * DAY + 90 * timedelta(minutes=1)), (-H, H)]


def test_intents_spread_wider_than_the_span_are_cut_into_full_windows():
    # Every half hour for 50 hours: 52 hours to cover, so three windows, the first two a full day.
    found = windows(at(*(k * timedelta(minutes=30) for k in range(101))))
    assert spans(found) == [(-H, 23 * H), (23 * H, 47 * H), (47 * H, 51 * H)]
    # A window exactly as wide as the span is allowed (slurmdbd refuses only wider ones).
    assert found[0].end - found[0].start == DEFAULT_SPAN
    # A smaller span.
    assert spans(windows(at(timedelta(0)), span=timedelta(minutes=45))) == [
        (-H, -H + timedelta(minutes=45)),
        (-H + timedelta(minutes=45), timedelta(minutes=30)),
        (timedelta(minutes=30), H),
    ]


def test_random_intents_are_covered_by_the_fewest_windows_no_wider_than_the_span():
    rng = random.Random(24)
    for _ in range(300):
        span = timedelta(hours=rng.choice([1, 3, 24]))
        offsets = [timedelta(minutes=rng.randrange(0, 5 * 24 * 60)) for _ in range(rng.randrange(1, 30))]
        intervals = at(*offsets)
        found = windows(intervals, span)
        assert all(w.end - w.start <= span for w in found)
        assert all(a.end <= b.start for a, b in zip(found, found[1:]))
        for start, end in intervals:  # each interval is covered, window after window
            covered = start
            for w in found:
                if w.start <= covered <= w.end:
                    covered = max(covered, w.end)
            assert covered >= end
        assert len(found) == _fewest(sorted(intervals), span)


def _fewest(intervals: list[tuple[datetime, datetime]], span: timedelta) -> int:
    """The fewest windows as counted by hand: a window opens at the first time not yet
    reached and reaches one span further, as often as each interval needs."""
    count, reach = 0, None
    for start, end in intervals:
        if reach is None or start > reach:
            count, reach = count + 1, start + span
        while end > reach:
            count, reach = count + 1, reach + span
    return count


def test_each_window_names_only_its_tokens_one_call_per_batch():
    times = {f"old{i}": around((T - 3 * DAY).isoformat()) for i in range(150)}
    times |= {"new": around(T.isoformat()), "edge": (T - 3 * DAY, T)}  # reaching over three days
    sacct = FakeSacct({})
    rows, queries, found = slurm.query_tokens(times, runner=sacct, batch=100)
    assert rows == {} and len(found) == 4
    names = [set(q.argv[-1].removeprefix("--name=").split(",")) for q in queries]
    # "new" touches the third window at its last second, so it is asked there too.
    assert [len(n) for n in names] == [100, 51, 1, 2, 2]
    assert "edge" in names[0] and names[2] == {"edge"} and names[3] == names[4] == {"edge", "new"}
    for q, w in zip(queries, [found[0], found[0], found[1], found[2], found[3]]):
        assert q.argv[-3:-1] == w.sacct_args()


def test_sacct_window_option(campaign, capsys):
    assert parse_span("1-00:00:00") == DAY and parse_span("06:30:00") == timedelta(hours=6, minutes=30)
    for bad in ("1 day", "00:00:30", ""):
        assert cli.main(["--output", str(campaign.root), "--sacct-window", bad]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"throughput-audit: --sacct-window {bad!r} is not a duration of at least a minute; write it as Slurm does, "
            "[D-]HH:MM:SS (for example 1-00:00:00, or your site's MaxQueryTimeRange)\n"
        )
    # One intent a week before the others (written from 12:00:01 to 12:05:01), a span of an
    # hour: 2 hours around the first, 2 h 5 min around the others, in windows of at most an hour.
    edit(
        campaign.root / "curves/20m-c512/b1/attempt-1/intent.json", lambda d: d.update(created_at="2026-10-01T12:00:00")
    )
    sacct = campaign.sacct()
    out = run_audit(campaign.root, runner=sacct, settle_seconds=0, sacct_window=H)
    (check,) = [c for c in out.report.checks if c.name == "slurm.unreceipted"]
    assert check.values["windows"] == check.values["queries"] == len(sacct.by_name()) == 5
    assert [len(argv[-1].split(",")) for argv in sacct.by_name()] == [1, 1, 7, 7, 7]
    assert check.values["span_seconds"] == 3600
