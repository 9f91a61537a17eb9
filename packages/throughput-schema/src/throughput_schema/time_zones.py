"""Time zones as TZ names them, for records and for the lines that tell a user what to set.

Records keep instants with their offset; the zone a campaign was watched in is kept
beside them (`Manifest.watcher_zone`) for the reader, and `fixed_zone` writes the TZ of
a UTC offset read back from times that named none.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

__all__ = ["fixed_zone", "local_zone", "utc_offset_text"]


def _parts(offset: timedelta) -> tuple[str, int, int]:
    minutes = abs(offset) // timedelta(minutes=1)
    return ("-" if offset < timedelta(0) else "+"), minutes // 60, minutes % 60


def utc_offset_text(offset: timedelta) -> str:
    """'UTC+05:30'."""
    sign, hours, minutes = _parts(offset)
    return f"UTC{sign}{hours:02d}:{minutes:02d}"


def fixed_zone(offset: timedelta) -> str:
    """The TZ of a fixed UTC offset: '<+0530>-05:30' (POSIX counts west of UTC as positive)."""
    sign, hours, minutes = _parts(offset)
    west = "+" if sign == "-" else "-"
    return f"<{sign}{hours:02d}{minutes:02d}>{west}{hours:02d}:{minutes:02d}"


def local_zone() -> str:
    """This process's zone as TZ would name it: TZ itself, else the system's zone
    (/etc/localtime's name), else the fixed zone of its UTC offset now."""
    named = os.environ.get("TZ", "").removeprefix(":")
    if named:
        return named
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in target:
        return target.split("/zoneinfo/", 1)[1]
    return fixed_zone(datetime.now().astimezone().utcoffset() or timedelta(0))
