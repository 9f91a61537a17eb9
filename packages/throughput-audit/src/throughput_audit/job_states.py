"""A job's accounting in the project's words (`JobAccounting`), as every receipt stores it
whatever its scheduler: which end states agree with a result's outcome, and job ids in
the order they were given."""

from __future__ import annotations

import re
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


def _instant(text: str) -> datetime | None:
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
        if text and _instant(text) is None
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
    done, end = _instant(result_finished_at), _instant(acc.end)
    return done is not None and end is not None and done <= end
