"""Version 1's accounting, as `throughput-schema upgrade` reads it through this package.

A version-1 receipt kept its job's accounting as one sacct row (`AccountingRow`'s fields;
the local registry's rows in the same form), and results.csv and results.json kept sacct's
State and Elapsed. The schema names no scheduler, so its upgrade finds these three readers
by the entry point group `throughput_schema.version_one_accounting` (pyproject.toml), and
each reads as the Slurm backend reads sacct's text today.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from throughput_slurm.sacct import AccountingRow, job_accounting, neutral_state, slurm_seconds

__all__ = ["accounting", "elapsed_seconds", "state"]


def accounting(row: dict, with_offset: Callable[[str], str]) -> dict:
    """A version-1 row (a dict of `AccountingRow`'s fields) as a `JobAccounting`'s fields,
    its Start and End first given an offset by `with_offset`; ValueError, saying why, for a
    dict that is not such a row."""
    try:
        read = msgspec.convert(row, AccountingRow)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    read = msgspec.structs.replace(read, start=with_offset(read.start), end=with_offset(read.end))
    return msgspec.to_builtins(job_accounting(read))


def state(text: str) -> str:
    """sacct's State column in the project's words."""
    return neutral_state(text)


def elapsed_seconds(text: str) -> float | None:
    """sacct's Elapsed column in seconds; None where it says none or is unreadable."""
    return slurm_seconds(text)
