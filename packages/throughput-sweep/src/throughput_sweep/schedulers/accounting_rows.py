"""A receipt's accounting row read into the interface's `Accounting`.

A receipt keeps its job's accounting as an `AccountingRow`: sacct's columns, as sacct
printed them, which the local registry writes in the same form for the audit to check.
Durations are Slurm's [D-]HH:MM:SS (`throughput_schema.sacct.slurm_minutes`), the GPUs
AllocTRES's (`throughput_schema.sacct.tres_gpus`: untyped, or typed where a site tracks
only types), the exit code `rc:signal`.
"""

from __future__ import annotations

import re

from throughput_schema import AccountingRow
from throughput_schema.sacct import parse_tres, slurm_minutes, tres_gpus
from throughput_sweep.schedulers.base import Accounting

_EXIT = re.compile(r"(\d+)(?::(\d+))?")


def _seconds(text: str) -> float | None:
    try:
        minutes = slurm_minutes(text)
    except ValueError:
        return None  # unreadable: not known, never a limit of none
    return None if minutes is None else 60.0 * minutes


def exit_status(text: str) -> tuple[int | None, int | None]:
    """The exit code and signal of an `rc:signal` text (None where not known)."""
    code = _EXIT.fullmatch(text.strip())
    if code is None:
        return None, None
    return int(code.group(1)), int(code.group(2)) if code.group(2) else None


def read_row(row: AccountingRow) -> Accounting:
    exit_code, signal = exit_status(row.exit_code)
    return Accounting(
        row=row,
        elapsed_seconds=_seconds(row.elapsed) if row.elapsed else None,
        time_limit_seconds=_seconds(row.timelimit),
        gpus=tres_gpus(parse_tres(row.alloc_tres)),
        exit_code=exit_code,
        signal=signal,
    )
