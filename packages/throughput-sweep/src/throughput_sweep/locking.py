"""One watcher per campaign: an exclusive, non-blocking lock file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from throughput_schema.layout import LOCK as LOCK_FILE

from throughput_sweep.campaign import CampaignError


class CampaignLock:
    """One watcher per campaign: an exclusive, non-blocking flock on `watcher.lock`."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> "CampaignLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CampaignError(
                f"{self.path.parent}: another watcher (pid {holder}) is already running this campaign; only one at a time"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
