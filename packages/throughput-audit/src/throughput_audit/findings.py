"""Collecting the audit's checks, in order, for `AuditReport`.

The records themselves (`Check`, `CurveFinding`, `AuditReport`) are the schema's
(`throughput_schema.audit`): audit.json is read by other processes (the comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from throughput_audit.stats import agree
from throughput_schema.audit import AuditSummary, Check


class Checks:
    """Collects checks in order; `expect` records a pass or a fail from one comparison."""

    def __init__(self) -> None:
        self.items: list[Check] = []

    def expect(self, name: str, ok: bool, file: str = "", message: str = "", **values: Any) -> bool:
        self.items.append(Check(name=name, status="pass" if ok else "fail", file=file, message=message, values=values))
        return ok

    def requested(self, name: str, file: str, ran: str, asked: str, verb: str) -> bool:
        """A result's choice (`ran`, what it `verb`) against the one its campaign asked for."""
        message = f"{file}: {verb} {ran}, the campaign asked for {asked}"
        return self.expect(name, ran == asked, file, message, ran=ran, requested=asked)

    def figure(
        self,
        name: str,
        file: str,
        recomputed: Any,
        reported: Any,
        *,
        what: str = "",
        how: str = "",
        suffix: str = "",
        show: Callable[[Any], str] = repr,
        message: str = "",
        same: bool | None = None,
        rel: float = 1e-9,
        abs_: float = 1e-12,
        given: dict[str, Any] | None = None,
        **values: Any,
    ) -> bool:
        """The audit's own figure against the one the result records, as one check.

        It reads "<file>: <what> recomputed <figure><how>, result says <figure><suffix>",
        or "<file>: <message>" where one phrase does not say it. The two agree as
        `stats.agree` has it, or as `same` says where they are not compared as figures.
        `values` records them as recomputed and reported, after the inputs in `given`.
        """
        if same is None:
            same = agree(recomputed, reported, rel=rel, abs_=abs_)
        if not message:
            message = f"{what} recomputed {show(recomputed)}{how}, result says {show(reported)}{suffix}"
        return self.expect(
            name, same, file, f"{file}: {message}", **(given or {}), recomputed=recomputed, reported=reported, **values
        )

    def fail(self, name: str, file: str, message: str, **values: Any) -> None:
        self.expect(name, False, file, message, **values)

    def not_applicable(self, name: str, message: str, file: str = "") -> None:
        self.items.append(Check(name=name, status="not_applicable", file=file, message=message))

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.items if c.status == "fail"]

    def summary(self) -> AuditSummary:
        counts = {"pass": 0, "fail": 0, "not_applicable": 0}
        for c in self.items:
            counts[c.status] += 1
        return AuditSummary(passed=counts["pass"], failed=counts["fail"], not_applicable=counts["not_applicable"])
