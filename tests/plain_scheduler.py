"""A third scheduler that ships nowhere: jobs as plain processes of this machine, under the name
"plain", with its own job logs, words and accounting reader.

It is the whole of what a new scheduler adds: this module (its backend, the plain processes
borrowed from the local scheduler's wrapper and registry) and its audit reader, registered
by name (`register`), beside no edit of any shared module. Its receipts keep the job's
accounting in the project's words (`JobAccounting`) with its own record of the job as `raw`
(`plain_accounting`), which its audit reader rebuilds from the registry and compares.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

from throughput_audit.accounting_readers import READERS, AccountingOptions, AccountingRead
from throughput_audit.campaign import Loaded
from throughput_audit.findings import Checks
from throughput_schema import scheduler_names
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.layout import RECEIPT
from throughput_schema.local_jobs import LOCAL_JOBS_DIR, LocalEnd, LocalJob, job_accounting, read_registry
from throughput_sweep.schedulers import BACKENDS
from throughput_sweep.schedulers.base import JobStatus
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

    def _status(self, job_id: str) -> JobStatus:
        status = super()._status(job_id)
        job = self._load(job_id)
        if job is None or status.accounting is None:
            return status
        return dataclasses.replace(status, accounting=plain_accounting(job, self._load_end(job_id)))


def plain_accounting(job: LocalJob, end: LocalEnd | None) -> JobAccounting:
    """The job in the project's words, read as the local scheduler reads its registry, with
    this scheduler's own record of it as `raw` (id, token, end state and exit code)."""
    said = job_accounting(job, end)
    own = "|".join((job.job_id, job.token, end.state if end else "RUNNING", end.exit_code if end else ""))
    return msgspec.structs.replace(said, raw=own)


def read_plain(loaded: Loaded, checks: Checks, options: AccountingOptions) -> AccountingRead:
    """Every receipt's job is in the registry under its token, and its final accounting is the
    one this scheduler reads from the registry now, its own record included."""
    registry = read_registry(loaded.root / LOCAL_JOBS_DIR)
    lines = [f"# {loaded.manifest.name}: {len(registry)} plain processes"]
    for record in loaded.attempts:
        receipt = record.attempt.receipt
        if receipt is None:
            continue
        entry = registry.get(receipt.job_id)
        now = plain_accounting(entry.job, entry.end) if entry is not None and entry.end is not None else None
        kept = receipt.accounting if receipt.accounting_final else None
        checks.expect(
            "plain.accounted",
            entry is not None and entry.job.token == receipt.token and now is not None and kept == now,
            record.file(RECEIPT),
            f"{record.file(RECEIPT)}: job {receipt.job_id}: the registry reads {now.raw if now else 'no end'}, "
            f"the receipt's final accounting {kept.raw if kept else 'none'}",
        )
        lines.append(f"{now.raw if now else receipt.job_id + '|unrecorded'}|{Path(record.rel)}")
    checks.not_applicable("slurm", "plain processes: Slurm accounting is not applicable")
    return AccountingRead("\n".join(lines) + "\n", "checked")


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's registry lines: its name, its backend, its accounting reader."""
    monkeypatch.setattr(scheduler_names, "SCHEDULER_NAMES", (*scheduler_names.SCHEDULER_NAMES, NAME))
    monkeypatch.setitem(BACKENDS.parts, NAME, lambda: PlainScheduler)
    monkeypatch.setitem(READERS.parts, NAME, read_plain)
