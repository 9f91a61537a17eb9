"""A job's accounting in the project's own words, as a receipt stores it.

Every backend reads its scheduler's accounting (Slurm's sacct row, the local scheduler's
job registry) into `JobAccounting`: the job's state among `JobState`, its times with their
offset, seconds, an exit code and signal, and what it was allocated. The backend's own
text is kept beside it, unread, in `raw`, for the audit's reader of that backend; shared
code reads only the neutral fields.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

JobState = Literal[
    "pending",
    "running",
    "completed",  # the batch script exited 0 (without a result, the point crashed)
    "failed",  # the batch script exited non-zero, or died of a signal
    "timeout",  # the scheduler's time limit
    "out_of_memory",  # the scheduler's memory limit
    "cancelled",  # cancelled by a user or an administrator
    "preempted",  # ended by the scheduler for other work
    "node_fail",  # the job's machine failed, or the job's wrapper vanished
    "gone",  # the queue answered without the job and accounting has no record of it yet
    "unknown",  # no query answered for the job
]

ENDED: frozenset[str] = frozenset(
    {"completed", "failed", "timeout", "out_of_memory", "cancelled", "preempted", "node_fail"}
)

# The outcome kind of a job that ended in each state without writing a result
# (`throughput_schema.outcomes`); ended by someone else (cancelled, preempted) is "cancelled".
OUTCOME_OF_STATE: dict[str, str] = {
    "completed": "crashed",
    "failed": "crashed",
    "timeout": "timeout",
    "out_of_memory": "host_oom",
    "cancelled": "cancelled",
    "preempted": "cancelled",
    "node_fail": "node_fail",
}


class JobAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """What the job was given; None or "" where the scheduler did not say."""

    nodes: str = ""  # the host or hosts, as the scheduler names them
    gpus: int | None = None
    cpus: int | None = None
    memory_bytes: int | None = None


class JobAccounting(msgspec.Struct, frozen=True, kw_only=True):
    """A job's accounting, read by its backend from the scheduler's own record (`raw`)."""

    job_id: str
    state: JobState
    # ISO 8601 instants with their offset; "" where the job has not started or ended.
    start: str = ""
    end: str = ""
    elapsed_seconds: float | None = None  # None: not known (yet)
    time_limit_seconds: float | None = None  # None: none, or not known
    exit_code: int | None = None  # the batch script's; None: not known
    signal: int | None = None  # the signal that ended it (0: none); None: not known
    allocation: JobAllocation = JobAllocation()
    energy_joules: float | None = None  # where the scheduler measures it; None: not measured
    # The backend's own record as it gave it (one sacct row; the local registry's records);
    # only that backend's reader reads it.
    raw: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def memory_bytes(text: str) -> int | None:
    """'64G', '1500M', '2T' (a number of mebibytes where no unit is given, as Slurm and the
    profiles write memory) in bytes; None where it is not such a size."""
    text = (text or "").strip().upper().removesuffix("B")
    unit = text[-1:] if text[-1:].isalpha() else ""
    number = text[: len(text) - len(unit)]
    try:
        value = float(number)
    except ValueError:
        return None
    if unit not in _UNITS or value < 0:
        return None
    return int(value * (_UNITS[unit] if unit else _UNITS["M"]))


_EXIT = re.compile(r"(\d+)(?::(\d+))?")


def exit_status(text: str) -> tuple[int | None, int | None]:
    """The exit code and signal of an `rc:signal` text (None where not known): how Slurm
    prints ExitCode, and how the local registry records a job's end in the same words."""
    code = _EXIT.fullmatch(text.strip())
    if code is None:
        return None, None
    return int(code.group(1)), int(code.group(2)) if code.group(2) else None
