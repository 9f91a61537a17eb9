"""The time windows of the audit's sacct queries by name.

sacct without `-j` finds jobs only inside a time window, and slurmdbd's MaxQueryTimeRange
refuses ordinary users a window wider than the site allows ("Too wide of a date range in
query"); one window from the campaign's creation to now grows with the campaign's age
until it is refused. So the jobs named by the campaign's tokens are looked for only around
the times their intents were written (the controller writes the intent, then runs sbatch
at once, and a retry writes a new intent with a new token), each with a margin for clock
skew, in as few windows as cover those times, none wider than the span.

sacct selects a job into a window when it was eligible before the window's end and had
not ended before its start, so a job is found in the window holding its submission even
when it pended or ran long after.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from throughput_audit.allocation import timelimit_minutes
from throughput_schema.local_jobs import slurm_duration
from throughput_schema.slurm_env import slurm_time

# The login node writing intents and slurmctld stamping jobs may disagree by minutes, and
# sbatch itself may take a while to answer.
SKEW_MARGIN = timedelta(hours=1)
# Slurm's MaxQueryTimeRange is commonly a day or more; sites with less pass --sacct-window.
DEFAULT_SPAN = timedelta(days=1)
MIN_SPAN = timedelta(minutes=1)


@dataclass(frozen=True)
class Window:
    """[start, end] in whole seconds, UTC."""

    start: datetime
    end: datetime

    def sacct_args(self) -> list[str]:
        return [f"--starttime={slurm_time(self.start)}", f"--endtime={slurm_time(self.end)}"]

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return start <= self.end and end >= self.start

    def __str__(self) -> str:
        return f"{self.start.isoformat()} to {self.end.isoformat()}"


def around(written_at: str) -> tuple[datetime, datetime]:
    """The times (UTC, whole seconds) a job submitted under an intent written at this ISO
    time may carry; a time without an offset is UTC, as the controller writes it.
    ValueError if the text is not a time."""
    when = datetime.fromisoformat(written_at)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (_second((when - SKEW_MARGIN).timestamp(), math.floor), _second((when + SKEW_MARGIN).timestamp(), math.ceil))


def _second(epoch: float, rounding) -> datetime:
    return datetime.fromtimestamp(rounding(epoch), tz=UTC)


def windows(intervals: Iterable[tuple[datetime, datetime]], span: timedelta = DEFAULT_SPAN) -> list[Window]:
    """The fewest windows, none wider than `span`, that together cover every interval:
    each starts at the first time not yet covered and reaches as far as the span allows,
    ending early where nothing after it needs covering (a gap between intervals is covered
    when that saves a window)."""
    pieces = sorted(intervals)
    out: list[Window] = []
    i = 0
    while i < len(pieces):
        start = pieces[i][0]
        if out and start < out[-1].end:
            start = out[-1].end  # the rest of an interval the last window cut
        limit = start + span
        end = start
        while i < len(pieces) and pieces[i][0] <= limit:
            end = max(end, min(pieces[i][1], limit))
            if pieces[i][1] > limit:
                break
            i += 1
        out.append(Window(start, end))
    return out


def parse_span(text: str) -> timedelta:
    """--sacct-window's Slurm duration ([D-]HH:MM:SS, as MaxQueryTimeRange is written);
    ValueError with the line to show."""
    minutes = timelimit_minutes(text)
    if minutes is None or timedelta(minutes=minutes) < MIN_SPAN:
        raise ValueError(
            f"--sacct-window {text!r} is not a duration of at least a minute; write it as Slurm does, "
            "[D-]HH:MM:SS (for example 1-00:00:00, or your site's MaxQueryTimeRange)"
        )
    return timedelta(seconds=round(minutes * 60))


def span_text(span: timedelta) -> str:
    return slurm_duration(span.total_seconds())
