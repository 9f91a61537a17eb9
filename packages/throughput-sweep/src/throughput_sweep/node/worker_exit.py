"""How a worker process ended, in the watchdog's terms: its own result, or an outcome to record.

A result "written by the worker" is one whose file changed since the worker started and
decodes as a WorkerResult; anything else is replaced by the watchdog's record.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from throughput_schema import EXIT_CODES, SchemaError, read
from throughput_schema.outcomes import Crashed, HostOom, Outcome, StorageFull
from throughput_schema.records import WorkerResult


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def log(message: str) -> None:
    print(f"[watchdog {datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def exit_code_for(kind: str) -> int:
    if kind in ("ok", "capped"):
        return 0
    return EXIT_CODES.get(kind, EXIT_CODES["crashed"])


def snapshot(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def written_result(path: Path, before: tuple | None) -> WorkerResult | None:
    now = snapshot(path)
    if now is None or now == before:
        return None
    try:
        return read(path, WorkerResult)
    except SchemaError as exc:
        log(f"result {path} is not a valid worker result ({exc}); replacing it")
        return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def outcome_for_exit(returncode: int) -> Outcome:
    """The outcome of a worker that ended on its own without writing a result."""
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGKILL:
            return HostOom(
                phase="worker",
                message="killed by signal 9 (SIGKILL) without writing a result, likely host memory "
                "(the kernel OOM killer)",
            )
        return Crashed(
            phase="worker",
            exit_code=returncode,
            message=f"killed by signal {sig} ({signal_name(sig)}) without writing a result",
        )
    if returncode == EXIT_CODES["storage_full"]:
        return StorageFull(
            phase="worker",
            message=f"exited {returncode}: the worker could not write its result (the filesystem is full or over "
            "its quota; its log says where a copy was kept on the node)",
        )
    if returncode == 0:
        return Crashed(phase="worker", exit_code=0, message="exited 0 without writing a result")
    return Crashed(phase="worker", exit_code=returncode, message=f"exited {returncode} without writing a result")


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a worker's process group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
