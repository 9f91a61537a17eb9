"""Helpers the audit's package tests share: a campaign built on disk, edited, audited."""

from __future__ import annotations

import json
from pathlib import Path

from campaign_builder.fake_sacct import FakeSacct
from throughput_audit.audit import run_audit


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def failures(outcome, name: str | None = None):
    return [c for c in outcome.report.checks if c.status == "fail" and (name is None or c.name == name)]


def audit(built, sacct: FakeSacct | None = None):
    return run_audit(built.root, runner=sacct or built.sacct(), settle_seconds=0)


def point(built, curve: str, batch: int) -> Path:
    return built.points[curve][batch]
