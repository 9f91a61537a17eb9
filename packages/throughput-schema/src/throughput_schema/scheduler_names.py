"""The one list of scheduler names, and the registry each package keeps of its part of them.

A scheduler is three parts under one name: the name here (what a profile, an intent and a
receipt may say), its backend in the sweep (what submits and watches the jobs) and its
accounting reader in the audit (what the audit checks those jobs against). The schema
imports neither package, so each keeps its own `SchedulerParts` of the names below;
`check`, at each command's start and in the tests, refuses a listed name whose part is
missing, so a half-added scheduler never runs a job nor is audited against another's
accounting.
"""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

import msgspec

SCHEDULER_NAMES: tuple[str, ...] = ("slurm", "local")

# A field holding one of the names; the records validate it in `__post_init__` against
# the list as it stands, so the list is the only place a name is allowed.
SchedulerName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(SCHEDULER_NAMES)})]

T = TypeVar("T")


class UnknownScheduler(ValueError):
    """A scheduler name that is not listed, or that lacks a part; one line. A ValueError, so
    a record's decode reports it as a SchemaError with the field's path."""


def check_name(name: str) -> None:
    if name not in SCHEDULER_NAMES:
        raise UnknownScheduler(f"scheduler {name!r} is not one of: {', '.join(SCHEDULER_NAMES)}")


class SchedulerParts(Generic[T]):
    """One package's part of every scheduler (`what`: "backend in the sweep"), by name."""

    def __init__(self, what: str, parts: dict[str, T]) -> None:
        self.what = what
        self.parts = parts

    def check(self) -> None:
        """Every listed name has its part here, and nothing here lacks a listed name."""
        for name in SCHEDULER_NAMES:
            if name not in self.parts:
                raise UnknownScheduler(f"scheduler {name!r} has no {self.what}")
        for name in self.parts:
            check_name(name)

    def get(self, name: str) -> T:
        check_name(name)
        try:
            return self.parts[name]
        except KeyError:
            raise UnknownScheduler(f"scheduler {name!r} has no {self.what}") from None
