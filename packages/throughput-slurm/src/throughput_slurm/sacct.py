"""How sacct is asked and how its text is read: the field list, the row parser, Slurm's
durations, and the time windows a query by name is cut into.

The sweep (its Slurm backend) and the audit both query sacct with `--parsable2
--noheader -X --format=<FIELDS>` and read the answer here, so both read the same text
the same way; what each does with a row (the sweep's state machine, the audit's checks)
stays with it.

  * `AccountingRow` / `FIELDS`: one row as sacct printed it, and sacct's columns in order
    with the attribute each fills.
    Comment is last because it is free text and may hold '|': everything after the
    fourteenth '|' is the Comment.
  * `parse_rows` / `rows_by_job`: every row, or one per job id (step rows skipped, the
    last row of a requeued job winning). Start and End get their offset
    (`slurm_instant`: queries run in UTC).
  * `format_rows`: the rows as sacct printed them, under a header (accounting.txt).
  * `job_accounting` / `raw_row`: a row in the project's words (`JobAccounting`), which
    keeps the row as one line of sacct's text, and that line read back.
  * `slurm_minutes`: a Slurm duration in minutes; None where Slurm says there is no
    limit; ValueError, naming the text, for text that is not a duration.
  * `parse_tres` / `tres_gpus`: a TRES list (AllocTRES, MaxTRES, GrpTRES) as a dict, and
    its GPUs, untyped or typed.
  * `Window` / `windows`: sacct without `-j` finds jobs only inside a time window, and
    slurmdbd's MaxQueryTimeRange refuses a window wider than the site allows, so the
    times to search are covered by the fewest windows no wider than a span.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec

from throughput_schema.job_accounting import JobAccounting, JobAllocation, JobState, exit_status, memory_bytes
from throughput_slurm.environment import slurm_instant, slurm_time

__all__ = [
    "AccountingRow",
    "FIELDS",
    "DEFAULT_SPAN",
    "FORMAT",
    "MIN_SPAN",
    "NO_LIMIT",
    "Window",
    "ENDED_AS",
    "format_rows",
    "job_accounting",
    "raw_row",
    "slurm_duration",
    "parse_rows",
    "rows_by_job",
    "slurm_minutes",
    "slurm_seconds",
    "windows",
]


class AccountingRow(msgspec.Struct, frozen=True, kw_only=True):
    """One `sacct --parsable2` row, raw strings kept as Slurm printed them."""

    job_id: str
    job_name: str = ""
    state: str = ""
    exit_code: str = ""
    partition: str = ""
    account: str = ""
    timelimit: str = ""
    alloc_tres: str = ""
    req_mem: str = ""
    start: str = ""
    end: str = ""
    elapsed: str = ""
    comment: str = ""
    node_list: str = ""
    # Joules the job used, where the site runs an AcctGatherEnergyType plugin; "" or "0"
    # where it does not.
    consumed_energy_raw: str = ""


FIELDS: tuple[tuple[str, str], ...] = (
    ("JobID", "job_id"),
    ("JobName", "job_name"),
    ("State", "state"),
    ("ExitCode", "exit_code"),
    ("Partition", "partition"),
    ("Account", "account"),
    ("Timelimit", "timelimit"),
    ("AllocTRES", "alloc_tres"),
    ("ReqMem", "req_mem"),
    ("Start", "start"),
    ("End", "end"),
    ("Elapsed", "elapsed"),
    ("NodeList", "node_list"),
    ("ConsumedEnergyRaw", "consumed_energy_raw"),
    ("Comment", "comment"),
)
# sacct's --format argument.
FORMAT = ",".join(name for name, _ in FIELDS)


def parse_rows(text: str) -> list[AccountingRow]:
    """Every row of `sacct --parsable2 --noheader --format=FORMAT`, in order.

    A row with fewer fields than asked gets the rest empty, so that a check of the row
    names what is missing instead of the row vanishing.
    """
    out = []
    n = len(FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < n:
            parts += [""] * (n - len(parts))
        parts = parts[: n - 1] + ["|".join(parts[n - 1 :])]
        values = {attr: value for (_, attr), value in zip(FIELDS, parts)}
        values.update(start=slurm_instant(values["start"]), end=slurm_instant(values["end"]))
        out.append(AccountingRow(**values))
    return out


def rows_by_job(text: str) -> dict[str, AccountingRow]:
    """`parse_rows` keyed by job id: step rows (`123.batch`) skipped, and the last row of a
    job id that appears twice (a requeue) kept."""
    return {row.job_id: row for row in parse_rows(text) if "." not in row.job_id}


def format_rows(rows: Iterable[AccountingRow]) -> str:
    """The rows as sacct printed them, one a line, under a header of `FIELDS`."""
    lines = ["|".join(name for name, _ in FIELDS)]
    lines += [_line(row) for row in rows]
    return "\n".join(lines) + "\n"


def _line(row: AccountingRow) -> str:
    return "|".join(getattr(row, attr) for _, attr in FIELDS)


# ---------------------------------------------------------------- neutral accounting

# Slurm's terminal states (`throughput_sweep.schedulers.slurm.states`) in the project's words.
ENDED_AS: dict[str, JobState] = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "OUT_OF_MEMORY": "out_of_memory",
    "CANCELLED": "cancelled",
    "PREEMPTED": "preempted",
    "REVOKED": "preempted",
    "NODE_FAIL": "node_fail",
    "BOOT_FAIL": "node_fail",
}
_LIVE: dict[str, JobState] = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "RUNNING": "running",
    "SUSPENDED": "running",
    "COMPLETING": "running",
}


def neutral_state(state: str) -> JobState:
    """sacct's State ('CANCELLED by 1000') in the project's words; "unknown" for any other."""
    word = state.split()[0] if state.split() else ""
    return ENDED_AS.get(word) or _LIVE.get(word, "unknown")


def slurm_seconds(text: str) -> float | None:
    """A Slurm duration in seconds; None where it says there is no limit or is unreadable
    (not known, never a limit of none)."""
    try:
        minutes = slurm_minutes(text)
    except ValueError:
        return None
    return None if minutes is None else 60.0 * minutes


def _count(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


# What sacct prints for a time that has not happened (a job not started, not ended).
_NOT_YET = ("", "Unknown", "None")


def _instant(text: str) -> str:
    """A Start or End as sacct gave it, "" where it has not happened: other text (a time
    printed without its date) is kept, for the audit to name."""
    return "" if text.strip() in _NOT_YET else text


def job_accounting(row: AccountingRow) -> JobAccounting:
    """The row in the project's words, the row itself kept as one line of sacct's text."""
    exit_code, signal = exit_status(row.exit_code)
    tres = parse_tres(row.alloc_tres)
    energy = row.consumed_energy_raw.strip()
    return JobAccounting(
        job_id=row.job_id,
        state=neutral_state(row.state),
        start=_instant(row.start),
        end=_instant(row.end),
        elapsed_seconds=slurm_seconds(row.elapsed) if row.elapsed else None,
        time_limit_seconds=slurm_seconds(row.timelimit),
        exit_code=exit_code,
        signal=signal,
        allocation=JobAllocation(
            nodes=row.node_list,
            gpus=tres_gpus(tres),
            cpus=_count(tres.get("cpu")),
            memory_bytes=memory_bytes(tres["mem"]) if "mem" in tres else None,
        ),
        # "0" where the site runs no energy plugin: not measured, never zero joules.
        energy_joules=float(energy) if energy.isdigit() and int(energy) > 0 else None,
        raw=_line(row),
    )


def raw_row(raw: str) -> AccountingRow | None:
    """The sacct row a `JobAccounting.raw` of the Slurm backend holds; None where it holds none."""
    rows = parse_rows(raw)
    return rows[0] if len(rows) == 1 else None


# ------------------------------------------------------------------------ durations

# What Slurm prints where a duration has no limit or no value.
NO_LIMIT = ("", "UNLIMITED", "Partition_Limit", "INVALID")
_DURATION = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)")


def slurm_minutes(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS or MM:SS (as sacct, scontrol and sacctmgr print Elapsed,
    Timelimit, MaxTime and MaxWall) in minutes; None for `NO_LIMIT`.

    ValueError, naming the text, for anything else: an unreadable duration is never read
    as no limit, so each caller says what it does with one.
    """
    text = (text or "").strip()
    if text in NO_LIMIT:
        return None
    m = _DURATION.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a Slurm duration ([D-]HH:MM:SS)")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return days * 1440 + hours * 60 + minutes + seconds / 60


def slurm_duration(seconds: float) -> str:
    """Seconds as Slurm prints Elapsed and Timelimit: [D-]HH:MM:SS."""
    seconds = max(0, int(round(seconds)))
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


# ----------------------------------------------------------------------------- TRES


def parse_tres(text: str) -> dict[str, str]:
    """'billing=8,cpu=8,gres/gpu=1,mem=64G,node=1' -> {'billing': '8', ...}."""
    out = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def tres_gpus(tres: dict[str, str]) -> int | None:
    """The GPUs a TRES list counts: `gres/gpu`, or where a site tracks only typed GPUs
    (AccountingStorageTRES=gres/gpu:h100) the sum of the `gres/gpu:TYPE` counts; None where it
    names no GPU or a count that is not a number."""
    if "gres/gpu" in tres:
        untyped = tres["gres/gpu"]
        return int(untyped) if untyped.isdigit() else None
    typed = [v for k, v in tres.items() if k.startswith("gres/gpu:")]
    if not typed or not all(v.isdigit() for v in typed):
        return None
    return sum(int(v) for v in typed)


# -------------------------------------------------------------------------- windows

# Slurm's MaxQueryTimeRange is commonly a day or more; sites with less ask for a narrower span.
DEFAULT_SPAN = timedelta(days=1)
MIN_SPAN = timedelta(minutes=1)


@dataclass(frozen=True)
class Window:
    """[start, end] of one sacct query, UTC."""

    start: datetime
    end: datetime

    def sacct_args(self, *, until_now: bool = False) -> list[str]:
        """--starttime and --endtime; `until_now` writes the end as sacct's `now`, so a
        window that reaches the present also holds what happened while it was asked."""
        end = "now" if until_now else slurm_time(self.end)
        return [f"--starttime={slurm_time(self.start)}", f"--endtime={end}"]

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return start <= self.end and end >= self.start

    def __str__(self) -> str:
        return f"{self.start.isoformat()} to {self.end.isoformat()}"


def windows(intervals: Iterable[tuple[datetime, datetime]], span: timedelta = DEFAULT_SPAN) -> list[Window]:
    """The fewest windows, none wider than `span`, that together cover every interval:
    each starts at the first time not yet covered and reaches as far as the span allows,
    ending early where nothing after it needs covering (a gap between intervals is covered
    when that saves a window). Consecutive windows that cut one interval share their edge.

    sacct selects a job into a window when it was eligible before the window's end and had
    not ended before its start, so a job is found in every window its life overlaps.
    """
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
