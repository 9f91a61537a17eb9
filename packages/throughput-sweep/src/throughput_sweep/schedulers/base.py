"""The scheduler interface (after submitit): submit, poll, find by token, cancel.

A campaign never talks to Slurm or to processes directly; it goes through one of
these, so the Slurm backend and the local executor are interchangeable and the
same batch script, watchdog and files serve both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from throughput_schema import AccountingRow
from throughput_schema.configs import SchedulerName

# Slurm's terminal states (sacct), from the table the audit reads too; the local executor
# reports the same names. Re-exported: the schedulers import it from here.
from throughput_schema.slurm_states import TERMINAL_STATES as TERMINAL_STATES


class SubmitFailed(RuntimeError):
    """The scheduler refused the job. `permanent` when retrying cannot help (bad account...)."""

    def __init__(self, message: str, *, permanent: bool, maybe_submitted: bool = False, limit: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        # The job may exist anyway: reconcile the intent by token before resubmitting.
        self.maybe_submitted = maybe_submitted
        # A submit limit: no job was made, and one will be accepted once fewer are queued.
        self.limit = limit


GONE_FROM_SQUEUE = "gone from squeue"


class QueryFailed(RuntimeError):
    """squeue/sacct (or the local registry) did not answer: state unknown, not 'gone'."""


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    # PENDING, RUNNING, a TERMINAL_STATES member, or UNKNOWN (asked, no answer yet).
    state: str
    accounting: AccountingRow | None = None
    # True once the accounting row is complete (sacct lags a few seconds after the end).
    accounting_final: bool = False
    # Why a PENDING job waits (squeue's reason), or a short note; for UNKNOWN, starting with
    # GONE_FROM_SQUEUE when squeue answered without the job (it ended; only sacct can say how).
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state.split()[0] in TERMINAL_STATES


class Scheduler(Protocol):
    name: SchedulerName
    slots: int  # jobs the backend runs at once; keep at most this many out

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        """Submit `script` (run in `workdir`), naming it by `token`; return the job id."""

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """States of these jobs with at most one queue query and one accounting query."""

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        """Job ids whose name or comment is each token, submitted since `since`.

        Raises QueryFailed unless every query answered: an intent may only be
        declared 'never submitted' when both the queue and accounting said so.
        """

    async def cancel(self, job_id: str) -> None:
        """Raises QueryFailed when the cancel command itself failed; a job that already ended is not an error."""

    async def launch_failure(self, job_id: str) -> str:
        """Why the scheduler ended this job before its script started ('' when it cannot say)."""
