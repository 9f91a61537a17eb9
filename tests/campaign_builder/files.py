"""Writing an attempt's records where the campaign layout puts them, and editing them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec

from throughput_schema import BurstSample, Receipt, SubmissionIntent, WorkerResult, read, write_atomic
from throughput_schema.layout import BASELINE, BURSTS, INTENT, JOB_SCRIPT, RECEIPT, RESULT, encode_bursts


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
