"""Collecting the audit's checks, in order, for `AuditReport`.

The records themselves (`Check`, `CurveFinding`, `AuditReport`) are the schema's
(`throughput_schema.audit`): audit.json is read by other processes (the comparison).
"""

from __future__ import annotations

from typing import Any

from throughput_schema.audit import AuditSummary, Check


class Checks:
    """Collects checks in order; `expect` records a pass or a fail from one comparison."""

    def __init__(self) -> None:
        self.items: list[Check] = []

    def expect(self, name: str, ok: bool, file: str = "", message: str = "", **values: Any) -> bool:
        self.items.append(Check(name=name, status="pass" if ok else "fail", file=file, message=message, values=values))
        return ok

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
