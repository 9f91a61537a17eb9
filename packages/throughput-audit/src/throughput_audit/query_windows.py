"""The time windows of the audit's sacct queries by name.

sacct without `-j` finds jobs only inside a time window, and slurmdbd's MaxQueryTimeRange
refuses ordinary users a window wider than the site allows ("Too wide of a date range in
query"); one window from the campaign's creation to now grows with the campaign's age
until it is refused. So the jobs named by the campaign's tokens are looked for only around
the times their intents were written (the controller writes the intent, then runs sbatch
at once, and a retry writes a new intent with a new token), each with a margin for clock
skew, in as few windows as cover those times, none wider than the span
(`throughput_slurm.sacct.windows`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from throughput_slurm.sacct import DEFAULT_SPAN, MIN_SPAN, slurm_duration, slurm_minutes

# The login node writing intents and slurmctld stamping jobs may disagree by minutes, and
# sbatch itself may take a while to answer.
SKEW_MARGIN = timedelta(hours=1)
__all__ = ["DEFAULT_SPAN", "SKEW_MARGIN", "around", "parse_span", "span_text"]


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


def parse_span(text: str) -> timedelta:
    """--sacct-window's Slurm duration ([D-]HH:MM:SS, as MaxQueryTimeRange is written);
    ValueError with the line to show."""
    try:
        minutes = slurm_minutes(text)
    except ValueError:
        minutes = None
    if minutes is None or timedelta(minutes=minutes) < MIN_SPAN:
        raise ValueError(
            f"--sacct-window {text!r} is not a duration of at least a minute; write it as Slurm does, "
            "[D-]HH:MM:SS (for example 1-00:00:00, or your site's MaxQueryTimeRange)"
        )
    return timedelta(seconds=round(minutes * 60))


def span_text(span: timedelta) -> str:
    return slurm_duration(span.total_seconds())
