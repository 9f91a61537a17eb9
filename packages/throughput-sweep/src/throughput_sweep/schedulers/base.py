"""The scheduler interface (after submitit): submit, poll, find by token, cancel, in a
vocabulary of its own that no scheduler's text crosses.

A campaign never talks to Slurm or to processes directly; it goes through one of
these, so the Slurm backend and the local executor are interchangeable and the
same batch script, watchdog and files serve both. Each backend translates its own text
into the words here: a job's `JobState`, a `Pending` reason classified as one that waits
or one that never starts, and its accounting as the receipt stores it (`JobAccounting`:
seconds, the allocation, an exit code, and the backend's own record kept unread in `raw`).
What a user reads stays in the backend's own words (`JobStatus.said`, `Pending.text`).

A backend is a class (`Backend`): what the campaign asks of it before any job (its
defaults, the environment it keeps from jobs, the submit command it would run and the extra
arguments it refuses, how a pending reason reads, its job logs' names, whether it is found
here, its preflight, its words for a job it ended early) is asked of the class; an instance
(`Scheduler`) runs the jobs. Shared code asks these, and never reads a scheduler's text
itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from throughput_schema import ClusterProfile, JobAccounting
from throughput_schema.configs import SchedulerName
from throughput_schema.job_accounting import ENDED, OUTCOME_OF_STATE, JobState

__all__ = ["ENDED", "OUTCOME_OF_STATE", "JobState"]  # the states, for the backends and the sweep

if TYPE_CHECKING:
    from throughput_sweep.campaign import Campaign
    from throughput_sweep.curves import Curve


class SubmitFailed(RuntimeError):
    """The scheduler refused the job. `permanent` when retrying cannot help (bad account...)."""

    def __init__(self, message: str, *, permanent: bool, maybe_submitted: bool = False, limit: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        # The job may exist anyway: reconcile the intent by token before resubmitting.
        self.maybe_submitted = maybe_submitted
        # A submit limit: no job was made, and one will be accepted once fewer are queued.
        self.limit = limit


class QueryFailed(RuntimeError):
    """The queue and the accounting (or the local registry) did not answer: state unknown, not 'gone'."""


@dataclass(frozen=True)
class Pending:
    """Why a pending job waits, classified by its backend."""

    text: str  # the backend's own reason, shown as it is and kept in a refused result
    never_starts: bool = False  # waiting cannot clear it: the job is refused and cancelled
    fix: str = ""  # for one that never starts: what the user changes, in one line
    # An allocation budget: used up when it never starts (the campaign stops submitting),
    # else a budget of running jobs' time that clears as they end.
    budget: bool = False


@dataclass
class Findings:
    """What a backend's preflight found of a campaign's first job (`Backend.preflight`)."""

    problems: list[str] = field(default_factory=list)  # the first job could never run
    notes: list[str] = field(default_factory=list)  # it runs, slower or unchecked in part
    checked: list[str] = field(default_factory=list)  # what the scheduler confirmed


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: JobState
    said: str = ""  # the backend's own word for the state, for messages ('CANCELLED by 0')
    pending: Pending | None = None  # for a pending job
    accounting: JobAccounting | None = None
    # True once the accounting is complete (sacct lags a few seconds after the end).
    accounting_final: bool = False
    note: str = ""  # for gone or unknown: what was asked and what answered; else a short note

    @property
    def finished(self) -> bool:
        return self.state in ENDED

    @property
    def word(self) -> str:
        """The backend's word for the state, as messages name it ('CANCELLED', 'TIMEOUT')."""
        return (self.said.split() or [self.state.upper()])[0]


class Scheduler(Protocol):
    slots: int  # jobs the backend runs at once; keep at most this many out

    @property
    def name(self) -> SchedulerName:
        """The scheduler's name (`throughput_schema.scheduler_names`), as receipts record it."""

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

    async def ended_reason(self, job_id: str) -> str:
        """The scheduler's reason for a job it ended, while it still remembers ('' when it cannot say)."""

    def removed_environment(self) -> Mapping[str, str]:
        """The variables of this shell kept from the scheduler's commands and the jobs ({} for none)."""


class Backend(Protocol):
    """The class behind a scheduler name (`schedulers.BACKENDS`)."""

    name: ClassVar[SchedulerName]
    # Where a receipt's elapsed times come from, for the GPU-hours line.
    accounting_source: ClassVar[str]
    # The watcher's longest wait between two polls, unless the user sets one.
    poll_max_seconds: ClassVar[float]
    # Jobs run on other machines (compute nodes) than the watcher's.
    remote_nodes: ClassVar[bool]
    # The scheduler's name in messages ("Slurm"), where the interface's words need its own.
    title: ClassVar[str]
    # The command that shows what an allocation budget has left, for messages ('' for none).
    budget_check: ClassVar[str]
    # The command a user cancels a job with, followed by its ids ('' for none).
    cancel_command: ClassVar[str]

    @classmethod
    def for_campaign(cls, profile: ClusterProfile, campaign: Path, **kwargs: Any) -> Scheduler:
        """The scheduler that runs the campaign's jobs."""

    @classmethod
    def for_status(cls, profile: ClusterProfile, campaign: Path) -> Scheduler:
        """A scheduler for one quick poll by `status`: short time-outs, hands out no slots."""

    @staticmethod
    def environment_removed() -> dict[str, str]:
        """What `removed_environment` would keep from jobs started now (the manifest records it)."""

    @staticmethod
    def read_pending(reason: str) -> Pending:
        """A pending reason this scheduler gave (a refused result keeps it), classified."""

    @staticmethod
    def submit_command(profile: ClusterProfile, script: Path, *, token: str, workdir: Path) -> list[str] | None:
        """The command line a job is submitted with (None: no command, it starts in-process)."""

    @staticmethod
    def detect() -> str:
        """This scheduler's cluster as seen from here, for a message ("Slurm (/usr/bin/sbatch)"),
        or '' where there is none. Where any backend finds one, the profile must be chosen:
        the local default would run the jobs on a login node."""

    @staticmethod
    def submit_args_problem(args: list[str]) -> str:
        """What in a profile's `extra_submit_args` a campaign cannot follow, as one line naming
        the items and the fix ('' where nothing is)."""

    @staticmethod
    def job_log(job_id: str) -> str:
        """The file name of a job's output in its attempt folder."""

    @classmethod
    def preflight(cls, campaign: Campaign, curves: list[Curve], *, dry_run: bool) -> Findings | str:
        """Can the first job of `campaign` (a preview, not yet created) ever run here, and what
        will slow it; a str, one line, where nothing was asked and why."""

    @staticmethod
    def early_end(log: Path, reason: str) -> str:
        """What the scheduler said of a job it ended before its time limit, from the job's
        output file and its `ended_reason`, as a clause of a message ('' where it said nothing)."""

    @staticmethod
    def refusal_fields(message: str) -> str:
        """The profile fields a refusal of this scheduler's comes from ('' where it does not):
        fixing them, not retrying, is what helps."""
