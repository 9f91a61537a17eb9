"""Where a record goes when the campaign's filesystem cannot take it (full, or over its quota).

A job that measured its point, or knows how it ended, should not lose that because scratch
filled up: the record is written once more into the node's own temporary space, at the
campaign path mirrored under `$TMPDIR/throughput-unwritten/` (the same place on every try,
so a later reader on that node finds it). The caller then exits with the `storage_full`
status, which the scheduler's accounting keeps even where the job log cannot take a line.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from throughput_schema.argparsing import storage_error, storage_reason
from throughput_schema.codec import write_atomic

NODE_LOCAL_FOLDER = "throughput-unwritten"


class ResultNotWritten(Exception):
    """A record that its campaign's filesystem refused; `kept` is the node-local copy (None
    where that could not be written either)."""

    def __init__(self, error: OSError, path: Path, kept: Path | None) -> None:
        super().__init__(error, path, kept)
        self.error, self.path, self.kept = error, path, kept

    def __str__(self) -> str:
        where = f"a copy is kept on this node at {self.kept}" if self.kept else "no copy could be kept on this node"
        named = OSError(self.error.errno, self.error.strerror, str(self.path))
        return f"{storage_reason(named)}; {where}"


def kept_path(path: Path) -> Path:
    """Where the node-local copy of `path` goes."""
    base = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / NODE_LOCAL_FOLDER
    return base / str(Path(path).absolute()).lstrip("/")


def not_written(exc: OSError, path: Path, record: Any) -> ResultNotWritten:
    """For a write of `record` to `path` that raised `exc`: a full disk or quota keeps the
    record on the node and is returned as ResultNotWritten to raise; anything else is
    raised as it is."""
    if storage_error(exc) is None:
        raise exc
    copy = kept_path(path)
    try:
        write_atomic(copy, record)
    except OSError:
        return ResultNotWritten(exc, Path(path), None)
    return ResultNotWritten(exc, Path(path), copy)
