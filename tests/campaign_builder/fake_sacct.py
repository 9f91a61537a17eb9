"""A stand-in for `sacct` at the audit's own boundary: it answers the audit's queries from
the accounting rows a campaign builder laid out, and counts them."""

from __future__ import annotations

from datetime import UTC, datetime
from subprocess import CompletedProcess

from throughput_slurm.sacct import FIELDS, AccountingRow


def _printed(attr: str, value: str) -> str:
    """A row's figure as sacct prints it under TZ=UTC: a time in UTC, without its offset."""
    if attr not in ("start", "end"):
        return value
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return value
    return when.astimezone(UTC).replace(tzinfo=None).isoformat() if when.tzinfo else value


class FakeSacct:
    """Answers `sacct ... -j a,b,c` and `sacct ... --name=t,u` like `--parsable2 --noheader`
    in the audit's TZ=UTC (times without their offset), and counts the calls. A name query
    ignores its time window: every row is in it."""

    def __init__(self, rows: dict[str, AccountingRow]) -> None:
        self.rows = rows
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        if "-j" in argv:
            ids = argv[argv.index("-j") + 1].split(",")
            rows = [self.rows[i] for i in ids if i in self.rows]
        else:
            names = set(next(a for a in argv if a.startswith("--name=")).removeprefix("--name=").split(","))
            rows = [row for row in self.rows.values() if row.job_name in names]
        lines = ["|".join(_printed(attr, getattr(row, attr)) for _, attr in FIELDS) for row in rows]
        return CompletedProcess(argv, 0, "".join(line + "\n" for line in lines), "")

    def by_id(self) -> list[list[str]]:
        return [argv for argv in self.calls if "-j" in argv]

    def by_name(self) -> list[list[str]]:
        return [argv for argv in self.calls if "-j" not in argv]
