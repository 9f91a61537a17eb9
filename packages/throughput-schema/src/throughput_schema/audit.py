"""`audit.json`: what `throughput-audit` found in a campaign, as the comparison reads it.

One `Check` per comparison, each naming what was compared, the file it came from
(relative to the campaign) and the numbers on both sides, so a failure can be read
without the audit's source; a `CurveFinding` per curve as the audit derives it from
the raw files. The audit writes these with msgspec's plain encoder in field order:
new fields get defaults and go last, so audits of the same `AUDIT_VERSION` still decode.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

CheckStatus = Literal["pass", "fail", "not_applicable"]
# What the audit made of the scheduler's accounting (sacct, the local job registry).
SchedulerAccounting = Literal["checked", "not_applicable", "not_available"]

AUDIT_VERSION = 2


class Check(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    status: CheckStatus
    file: str = ""
    message: str = ""
    values: dict[str, Any] = {}


class CurveFinding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A curve as the audit derives it from the raw files."""

    curve: str
    state: Literal["pending", "blocked", "bounded", "capped", "complete", "incomplete", "closed"]
    batches: list[int] = []
    fitting_batches: list[int] = []
    largest_fitting_batch: int | None = None
    first_oom_batch: int | None = None
    unstable_batches: list[int] = []
    blocked_batch: int | None = None
    blocked_reason: str = ""


class AuditSummary(msgspec.Struct, frozen=True, kw_only=True):
    passed: int
    failed: int
    not_applicable: int


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    audit_version: int
    campaign: str
    name: str
    kind: str
    audited_at: str
    tool_version: str
    # "not_available": the scheduler's accounting did not answer (sacct missing or failing,
    # slurmdbd down); a failed check says so. "not_applicable": its checks were skipped.
    scheduler_accounting: SchedulerAccounting
    summary: AuditSummary
    curves: list[CurveFinding]
    checks: list[Check]
    # The test worker allowed by --allow-test-worker ("" for the production worker).
    test_worker: str = ""
    # Lines shown beside the counts: the test-worker banner, a protocol that differs
    # from the guide's, points on different hardware or software.
    notes: list[str] = []

    @property
    def ok(self) -> bool:
        return self.summary.failed == 0
