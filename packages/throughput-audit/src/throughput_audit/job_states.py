"""A job's accounting in the project's words (`JobAccounting`), as every receipt stores it
whatever its scheduler: which end states agree with a result's outcome, its times as
instants, the most jobs that ran at once, and job ids in the order they were given."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from throughput_schema.job_accounting import OUTCOME_OF_STATE, JobAccounting
from throughput_schema.outcomes import EXIT_CODES

# Outcomes a job's own exit status carries: the worker or its watchdog exits with the
# outcome's code (`EXIT_CODES`), and the batch script passes it on as a failure.
_CARRIED = frozenset(EXIT_CODES) - {"ok", "crashed", "usage"}


def job_order(job_id: str) -> tuple[int, str]:
    """Job ids by their leading number ('9' before '10'), then as text."""
    head = re.match(r"\d+", job_id)
    return (int(head.group()) if head else 0, job_id)


def expected_ends(outcome: str) -> tuple[tuple[str, int | None], ...]:
    """(state, exit code or None for any) pairs a job whose result has `outcome` may end with."""
    if outcome == "ok":
        return (("completed", 0),)
    if outcome == "crashed":
        return (("failed", None),)
    if outcome == "refused":  # pended for a reason that never clears (the watcher cancelled it),
        return (("cancelled", None), ("failed", EXIT_CODES[outcome]))  # or the worker refused
    pairs: list[tuple[str, int | None]] = [
        (s, None) for s, o in OUTCOME_OF_STATE.items() if o == outcome and s not in ("completed", "failed")
    ]
    if outcome in _CARRIED:
        pairs.append(("failed", EXIT_CODES[outcome]))
    return tuple(pairs)


def expected_text(outcome: str) -> str:
    options = expected_ends(outcome)
    if not options:
        return "no end state"
    text = " or ".join(s if code is None else f"{s} with exit {code}" for s, code in options)
    return f"{text} (or node_fail ending after the result was finished)"


def instant(text: str) -> datetime | None:
    """An accounting time (ISO 8601 with its offset) as an instant; None where it is absent
    or is not such a time (`time_problems` names those)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.astimezone(UTC) if when.tzinfo is not None else None


def time_problems(acc: JobAccounting) -> list[str]:
    """'start ...' / 'end ...' for each of the times that is there but is not an instant."""
    return [
        f"{field} {text!r} is not a date and time"
        for field, text in (("start", acc.start), ("end", acc.end))
        if text and instant(text) is None
    ]


def state_explains(outcome: str, acc: JobAccounting, result_finished_at: str) -> bool:
    """The job's end state agrees with the result's outcome, or the job was lost after the
    result was finished (its machine failed after the worker wrote a whole result)."""
    for state, code in expected_ends(outcome):
        if acc.state == state and (code is None or acc.exit_code == code):
            if outcome == "crashed" and acc.exit_code == 0:
                continue
            return True
    if acc.state != "node_fail":
        return False
    done, end = instant(result_finished_at), instant(acc.end)
    return done is not None and end is not None and done <= end


# A full date and time: a worker's clock, or a scheduler's printed under another time format
# ("19:19:41", "Tue 19:19"), which Python would read as today, or not at all.
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def job_time(text: str) -> datetime | None:
    """A worker's ISO timestamp as an instant (UTC); one without an offset is read as local.
    None where there is none. ValueError, naming the text, for anything else: a time that
    does not parse is never read as absent."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        if not _DATED.match(text):
            raise ValueError
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date and time") from None
    # Instants, not local wall times: around a daylight-saving change local times repeat.
    return when.astimezone(UTC)


def parse_time(text: str) -> datetime | None:
    """`job_time`, with unreadable text as None: for times whose reading is checked elsewhere."""
    try:
        return job_time(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Peak:
    jobs: int
    at: datetime | None
    job_ids: list[str]
    counted: int = 0  # jobs whose start (and end, if ended) were read
    unreadable: tuple[str, ...] = ()  # "job 42: start '19:19:41' is not a date and time ..."


def peak_concurrency(jobs: Iterable[JobAccounting], *, now: datetime | None = None) -> Peak:
    """Most jobs running at one instant, from their start and end. A job ending at t and one
    starting at t do not overlap."""
    # At one timestamp (schedulers record whole seconds): ends of jobs that ran for a while
    # (0), then starts (1), then ends of jobs that started and ended within that second (2).
    events: list[tuple[datetime, int, str]] = []
    unreadable: list[str] = []
    for acc in jobs:
        bad = time_problems(acc)
        if bad:
            unreadable.append(f"job {acc.job_id}: " + "; ".join(bad))
            continue
        start = instant(acc.start)
        if start is None:
            continue  # never started
        end = instant(acc.end) or now or datetime.now(UTC)
        events.append((start, 1, acc.job_id))
        events.append((max(end, start), 0 if end > start else 2, acc.job_id))
    events.sort(key=lambda e: (e[0], e[1]))
    running: set[str] = set()
    best = Peak(0, None, [])
    for when, kind, job in events:
        if kind == 1:
            running.add(job)
            if len(running) > best.jobs:
                best = Peak(len(running), when, sorted(running, key=job_order))
        else:
            running.discard(job)
    return Peak(best.jobs, best.at, best.job_ids, counted=len(events) // 2, unreadable=tuple(unreadable))
