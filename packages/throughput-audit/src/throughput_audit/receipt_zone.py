"""Receipts recorded before times carried their offset: in which zone are their times?

Such a campaign's receipts copy sacct's start and end as the watcher's shell printed them,
local to a zone no file names. Read in the auditor's zone they equal sacct's instants when
the audit runs in the zone the campaign was watched in; in another zone they are off by a
whole UTC offset for every job. That is one fact about the campaign, not a fault of each
receipt: it is said once (`slurm.receipt_zone`), with the TZ to audit in, and the receipts'
times are then left out of `slurm.receipt_accounting` (their other figures still count).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from throughput_audit import slurm
from throughput_audit.findings import Checks
from throughput_schema import AccountingRow
from throughput_schema.time_zones import fixed_zone, utc_offset_text

# UTC offsets are whole quarter hours, and within a day of UTC.
_QUARTER = timedelta(minutes=15)
_WIDEST = timedelta(hours=14)


def naive(recorded: AccountingRow) -> bool:
    """The receipt's start names no offset (recorded before times carried one)."""
    try:
        return datetime.fromisoformat(recorded.start).tzinfo is None
    except ValueError:
        return False


def zone_offset(recorded: AccountingRow, row: AccountingRow) -> timedelta | None:
    """The UTC offset the receipt's naive times were written in, read from its job's
    instants in sacct (start, and end when both have one); None where they carry an offset,
    do not parse, or disagree by anything but one whole offset."""
    if not naive(recorded):
        return None
    seen = set()
    for field in ("start", "end"):
        instant = slurm.parse_time(getattr(row, field))
        try:
            wall = datetime.fromisoformat(getattr(recorded, field))
        except ValueError:
            wall = None
        if instant is None or wall is None or wall.tzinfo is not None:
            continue
        seen.add(wall - instant.replace(tzinfo=None))
    if len(seen) != 1:
        return None
    (offset,) = seen
    return offset if offset % _QUARTER == timedelta(0) and abs(offset) <= _WIDEST else None


def check_receipt_zone(root: Path, pairs: list[tuple[AccountingRow, AccountingRow]], checks: Checks) -> bool:
    """One line when receipts' naive times are local to a zone other than the auditor's.
    `pairs`: (the receipt's accounting, sacct's row). True when their times are to be left
    out of the receipt comparison."""
    offsets: Counter[timedelta] = Counter()
    for recorded, row in pairs:
        offset = zone_offset(recorded, row)
        if offset is None:
            continue
        instant = slurm.parse_time(row.start)
        here = instant.astimezone().utcoffset() if instant is not None else None
        if offset != here:
            offsets[offset] += 1
    if not offsets:
        return False
    count = sum(offsets.values())
    read_as = " and ".join(f"{utc_offset_text(o)} ({n} receipts)" for o, n in offsets.most_common())
    common = offsets.most_common(1)[0][0]
    checks.fail(
        "slurm.receipt_zone",
        "",
        f"{count} receipts hold their job's times without an offset, local to a zone the campaign does not "
        f"record (written before times carried one); they are wall times of {read_as}, not of this audit's zone: audit in the "
        f"zone the campaign was watched in, TZ='{fixed_zone(common)}' throughput-audit --output {root} "
        "(or TZ=<its name>, e.g. TZ=Europe/Berlin, which also follows its daylight-saving changes)",
        receipts=count,
        offsets={utc_offset_text(o): n for o, n in offsets.items()},
    )
    return True
