"""One watcher per campaign: an exclusive, non-blocking lock file, and what `status` reads of it.

The lock file names its holder ("PID HOST") while it is held and is emptied when it is
released, so a file that still names a pid while nobody holds the lock is stale: that
watcher ended without releasing it (SIGKILL, a lost login node).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from throughput_schema.layout import LOCK as LOCK_FILE
from throughput_sweep.campaign import CampaignError

# `status` takes the lock for an instant to learn whether a watcher holds it: a watcher
# starting in that instant tries once more after this long.
CONTENTION_RETRY_SECONDS = 0.5


def _holder(text: str) -> str:
    """'1234 login1' -> 'pid 1234 on login1' (older files hold the pid alone)."""
    words = text.split()
    if not words:
        return ""
    return f"pid {words[0]}" + (f" on {words[1]}" if len(words) > 1 else "")


class CampaignLock:
    """One watcher per campaign: an exclusive, non-blocking flock on `watcher.lock`."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> CampaignLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(CONTENTION_RETRY_SECONDS)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(os.read(fd, 256).decode(errors="replace")) or "another process"
            os.close(fd)
            raise CampaignError(
                f"{self.path.parent}: another watcher ({holder}) is already running this campaign; only one at a time"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # released: the file names no one
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


@dataclass(frozen=True)
class LockState:
    held: bool  # a watcher holds the lock now
    holder: str  # whom the file names ('pid 1234 on login1'), '' when no one


def probe(root: Path) -> LockState:
    """Whether a watcher holds the campaign's lock, and whom the lock file names."""
    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return LockState(held=False, holder="")
    try:
        holder = _holder(os.read(fd, 256).decode(errors="replace"))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return LockState(held=True, holder=holder)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return LockState(held=False, holder=holder)
    finally:
        os.close(fd)


def watcher_line(state: LockState, resume: str, done: bool) -> str:
    """status's line about the watcher: running, or not (naming a stale lock's holder)."""
    if state.held:
        return f"a watcher is running ({state.holder or 'pid unknown'})"
    stale = f" (stale lock of {state.holder}: that watcher ended without releasing it)" if state.holder else ""
    return f"no watcher is running{stale}" + ("" if done else f"; resume with: {resume}")
