"""Writing an attempt's records where the campaign layout puts them, and editing them."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

from throughput_schema import BurstSample, Receipt, SubmissionIntent, WorkerResult, read, write_atomic
from throughput_schema.job_accounting import JobAccounting, exit_status
from throughput_schema.layout import BASELINE, BURSTS, INTENT, JOB_SCRIPT, RECEIPT, RESULT, encode_bursts
from throughput_slurm.sacct import neutral_state


def write_attempt_files(
    folder: Path,
    *,
    script: str | None = None,
    intent: SubmissionIntent | None = None,
    receipt: Receipt | None = None,
    result: WorkerResult | None = None,
    baseline: WorkerResult | None = None,
    bursts: list[BurstSample] | None = None,
) -> Path:
    """Each record given, in the file the layout names for it."""
    for name, content in (
        (JOB_SCRIPT, script),
        (INTENT, intent),
        (RECEIPT, receipt),
        (RESULT, result),
        (BASELINE, baseline),
    ):
        if content is not None:
            write_atomic(Path(folder) / name, content)
    if bursts is not None:
        write_atomic(Path(folder) / BURSTS, encode_bursts(bursts))
    return Path(folder)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rewrite(path: Path, type_, **changes) -> None:
    """Replace fields of a record file in place (tests break files on purpose)."""
    write_atomic(path, msgspec.structs.replace(read(path, type_), **changes))


def finish_late(result: Path, hours: float = 1) -> None:
    """The worker's `finished_at` moved later (a planted fault: after its job ended)."""
    finished = datetime.fromisoformat(read(result, WorkerResult).finished_at) + timedelta(hours=hours)
    rewrite(result, WorkerResult, finished_at=finished.isoformat())


def receipt_ended(receipt: dict, state: str, exit_code: str, **times: str) -> None:
    """A receipt's JSON whose accounting says the job ended so, in sacct's words, read as the
    Slurm backend reads them; `times`: its start or end."""
    code, signal = exit_status(exit_code)
    receipt["accounting"].update(state=neutral_state(state), exit_code=code, signal=signal, **times)


def edit_receipt_accounting(receipt: Path, **changes) -> JobAccounting:
    """Fields of the receipt's accounting copy (which collect publishes) changed; the record before."""
    before = read(receipt, Receipt)
    rewrite(receipt, Receipt, accounting=msgspec.structs.replace(before.accounting, **changes))
    return before.accounting
