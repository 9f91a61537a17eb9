"""A third scheduler that ships nowhere: jobs as plain processes of this machine, under the name
"plain", with its own job logs, words and accounting reader.

It is the whole of what a new scheduler adds: this module (its backend, the plain processes
borrowed from the local scheduler's wrapper and registry) and its audit reader, registered
by name (`register`), beside no edit of any shared module.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from throughput_audit.accounting_readers import READERS, AccountingOptions, AccountingRead
from throughput_audit.campaign import Loaded
from throughput_audit.findings import Checks
from throughput_schema import scheduler_names
from throughput_schema.layout import RECEIPT
from throughput_schema.local_jobs import LOCAL_JOBS_DIR, read_registry
from throughput_sweep.schedulers import BACKENDS
from throughput_sweep.schedulers.local import LocalScheduler

NAME = "plain"


class PlainScheduler(LocalScheduler):
    name: ClassVar[str] = NAME
    title: ClassVar[str] = "the plain-process scheduler"

    @staticmethod
    def job_log(job_id: str) -> str:
        return f"plain-{job_id}.log"

    @staticmethod
    def submit_args_problem(args: list[str]) -> str:
        return f"extra_submit_args {' '.join(args)}: plain processes take none; remove them" if args else ""


def read_plain(loaded: Loaded, checks: Checks, options: AccountingOptions) -> AccountingRead:
    """Every receipt's job is in the registry under its token, and ended as its receipt says."""
    registry = read_registry(loaded.root / LOCAL_JOBS_DIR)
    lines = [f"# {loaded.manifest.name}: {len(registry)} plain processes"]
    for record in loaded.attempts:
        receipt = record.attempt.receipt
        if receipt is None:
            continue
        entry = registry.get(receipt.job_id)
        ended = entry.end.state if entry is not None and entry.end is not None else ""
        said = receipt.accounting.state if receipt.accounting is not None else ""
        checks.expect(
            "plain.accounted",
            entry is not None and entry.job.token == receipt.token and ended == said,
            record.file(RECEIPT),
            f"{record.file(RECEIPT)}: job {receipt.job_id} ended {ended or 'unrecorded'}, the receipt says {said}",
        )
        lines.append(f"{receipt.job_id}|{ended}|{Path(record.rel)}")
    checks.not_applicable("slurm", "plain processes: Slurm accounting is not applicable")
    return AccountingRead("\n".join(lines) + "\n", "not_applicable")


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's registry lines: its name, its backend, its accounting reader."""
    monkeypatch.setattr(scheduler_names, "SCHEDULER_NAMES", (*scheduler_names.SCHEDULER_NAMES, NAME))
    monkeypatch.setitem(BACKENDS.parts, NAME, lambda: PlainScheduler)
    monkeypatch.setitem(READERS.parts, NAME, read_plain)
