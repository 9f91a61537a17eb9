"""Slurm through its command-line tools (sbatch, squeue, sacct, scancel) as anyio subprocesses.

Every command is an argv list (`submit.sbatch_argv`); no shell is ever involved. The output
is read by `text`, the sacct layer (`throughput_slurm.sacct`) and `reasons`.
Every command runs in `throughput_slurm.environment.slurm_environment`: the shell's
environment without SBATCH_*/SLURM_* variables (SLURM_CONF kept), SLURM_TIME_FORMAT=standard,
and, but for sbatch (whose environment is the job's), TZ=UTC (`query_environment`), with
sacct's times written in UTC (`slurm_time`). A sacct that exits 0 but prints an error
(before 23.11.4, with slurmdbd down) failed.

Polling (one cycle = one `poll()` call):
  * ONE `squeue` for all ids. A job missing from squeue is "ask sacct", never over:
    squeue forgets jobs `MinJobAge` seconds after they end, and a single unknown id
    makes squeue exit 1 ("Invalid job id specified"), which is an empty answer here.
  * ONE `sacct -X -j id,id,...` for every id that squeue did not list or listed ended. A
    row is `accounting_final` only once sacct has caught up (`accounting_is_final`).
  * No retries inside a cycle: the watcher's next cycle is the retry. When squeue fails
    every id goes to sacct (which also knows PENDING/RUNNING jobs). An id squeue did not
    list and sacct gave no row for comes back `gone` (squeue answered) or `unknown` (it
    failed too). `poll` raises `QueryFailed` only when no query answered at all.
  * Each status in the interface's words (`text.job_status`); `commands_last_poll` and
    `command_counts` count the commands.

Lookup by token (`find_by_token`): ONE `squeue --name` and `sacct --name` in windows of at most
`query_span` (`sacct.windows`) since the oldest intent: below slurmdbd's MaxQueryTimeRange.

Submission: `sbatch --parsable --no-requeue` with resources on the command line (the batch
script has no #SBATCH lines). The job id is the one line of sbatch's answer that is an id
(`sbatch_job_id`), wherever a site's wrapper puts it; when no line or more than one is, and
before every retry after a transient failure (which may hide an accepted job), the job is
looked up by its token; where that cannot prove absence, `SubmitFailed(maybe_submitted=True)`:
the caller keeps the intent and reconciles it by token later. Permanent failures (bad account, partition, QOS, constraints...) raise
`SubmitFailed(permanent=True)` at once, and a submit limit `SubmitFailed(limit=True)` at
once (no job was made; the watcher lowers its slots and waits).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import anyio

from throughput_schema import ClusterProfile
from throughput_schema.configs import SchedulerName
from throughput_slurm.environment import query_environment, slurm_environment
from throughput_slurm.sacct import DEFAULT_SPAN, FORMAT, MIN_SPAN, rows_by_job, windows
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve
from throughput_sweep.schedulers.base import Findings, JobStatus, Pending, QueryFailed, Scheduler, SubmitFailed
from throughput_sweep.schedulers.slurm.preflight import preflight
from throughput_sweep.schedulers.slurm.reasons import (
    may_hide_a_job,
    pending_reason,
    profile_fields,
    refusal_kind,
    refusal_text,
)
from throughput_sweep.schedulers.slurm.states import TERMINAL_STATES
from throughput_sweep.schedulers.slurm.submit import job_log, sbatch_argv, submit_args_problem
from throughput_sweep.schedulers.slurm.text import (
    SQUEUE_FORMAT,
    CommandResult,
    QueueEntry,
    _queue_state,
    accounting_is_final,
    job_status,
    launch_failure_note,
    normalize_state,
    parse_squeue,
    pending,
    says_error,
    sbatch_job_id,
    slurmstepd_says,
)

__all__ = ["CommandResult", "SlurmScheduler"]


# status waits no longer than this for each command (the watcher waits 60 s).
STATUS_COMMAND_TIMEOUT = 20.0


class SlurmScheduler:
    """The `Scheduler` interface on Slurm, and its `Backend`. `slots` is the profile's concurrency limit."""

    name: ClassVar[SchedulerName] = "slurm"
    accounting_source: ClassVar[str] = "sacct's Elapsed"
    poll_max_seconds: ClassVar[float] = 30.0  # every poll asks slurmctld and slurmdbd
    remote_nodes: ClassVar[bool] = True
    title: ClassVar[str] = "Slurm"
    budget_check: ClassVar[str] = "scontrol show assoc_mgr flags=assoc"
    cancel_command: ClassVar[str] = "scancel"

    @staticmethod
    def job_log(job_id: str) -> str:
        return job_log(job_id)

    @staticmethod
    def submit_args_problem(args: list[str]) -> str:
        return submit_args_problem(args)

    @classmethod
    def preflight(cls, campaign: Campaign, curves: list[Curve], *, dry_run: bool) -> Findings | str:
        return preflight(campaign, curves, dry_run=dry_run)

    @staticmethod
    def refusal_fields(message: str) -> str:
        return profile_fields(message)

    @staticmethod
    def detect() -> str:
        sbatch = shutil.which("sbatch")
        return f"Slurm ({sbatch})" if sbatch else ""

    @staticmethod
    def early_end(log: Path, reason: str) -> str:
        says = slurmstepd_says(log)
        return (f"; Slurm says: {says}" if says else "") + (f" (scontrol: Reason={reason})" if reason else "")

    @staticmethod
    def read_pending(reason: str) -> Pending:
        return pending(reason)

    @staticmethod
    def submit_command(profile: ClusterProfile, script: Path, *, token: str, workdir: Path) -> list[str] | None:
        return sbatch_argv(profile, script, token=token, workdir=workdir)

    @classmethod
    def for_campaign(cls, profile: ClusterProfile, campaign: Path, **kwargs: Any) -> Scheduler:
        return cls(profile, **kwargs)

    @classmethod
    def for_status(cls, profile: ClusterProfile, campaign: Path) -> Scheduler:
        return cls(profile, command_timeout=STATUS_COMMAND_TIMEOUT)

    @staticmethod
    def environment_removed() -> dict[str, str]:
        return slurm_environment(os.environ)[1]

    def removed_environment(self) -> dict[str, str]:
        return self.removed

    def __init__(
        self,
        profile: ClusterProfile,
        *,
        submit_attempts: int = 3,
        backoff_seconds: float = 2.0,
        command_timeout: float = 60.0,
        since_margin: timedelta = timedelta(hours=1),
        query_span: timedelta = DEFAULT_SPAN,
        commands: dict[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self.slots = profile.max_concurrent_jobs
        self.submit_attempts = max(1, submit_attempts)
        self.backoff_seconds = backoff_seconds
        self.command_timeout = command_timeout
        self.since_margin = since_margin
        # sacct --name is asked in windows no wider than this: slurmdbd's MaxQueryTimeRange
        # refuses wider ones from ordinary users, and an old campaign's window would grow forever.
        self.query_span = max(query_span, MIN_SPAN)
        self._cmd = {
            "sbatch": "sbatch",
            "squeue": "squeue",
            "sacct": "sacct",
            "scancel": "scancel",
            "scontrol": "scontrol",
        }
        self._cmd.update(commands or {})
        self.command_counts: Counter[str] = Counter()
        self.commands_last_poll: list[str] = []
        # Every command runs in the shell's environment less what would change its job or
        # its answer (docs/reliability.md); `removed` is what was taken out.
        self.environment, self.removed = slurm_environment(os.environ)
        self.query_environment = query_environment(os.environ)

    # ------------------------------------------------------------------ commands

    async def _run(self, key: str, args: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        argv = [self._cmd[key], *args]
        self.command_counts[key] += 1
        try:
            with anyio.fail_after(timeout or self.command_timeout):
                env = self.environment if key == "sbatch" else self.query_environment
                proc = await anyio.run_process(argv, check=False, env=env)
        except TimeoutError:
            return CommandResult(argv, None, "", f"{key} did not answer within {timeout or self.command_timeout:.0f} s")
        except OSError as exc:  # command missing, not executable
            return CommandResult(argv, 127, "", f"cannot run {argv[0]}: {exc.strerror or exc}")
        stderr = proc.stderr.decode(errors="replace")
        return CommandResult(
            argv,
            proc.returncode,
            proc.stdout.decode(errors="replace"),
            stderr,
            reported_error=key == "sacct" and proc.returncode == 0 and says_error(stderr),
        )

    # -------------------------------------------------------------------- submit

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        argv = sbatch_argv(self.profile, Path(script), token=token, workdir=Path(workdir))[1:]
        last: CommandResult | None = None
        for attempt in range(1, self.submit_attempts + 1):
            if attempt > 1:
                assert last is not None, "every attempt before this one failed with a result"
                await anyio.sleep(self.backoff_seconds * 2 ** (attempt - 2))
                # The failed call may still have reached the controller: look first.
                found = await self._job_of(token, f"sbatch failed ({last.describe()})")
                if found:
                    return found
            last = await self._run("sbatch", argv)
            if last.ok:
                job_id = sbatch_job_id(last.stdout)
                if job_id is None:  # a site's wrapper printed around the id: the token tells
                    said = f"sbatch answered without one job id ({last.stdout.strip()!r})"
                    job_id = await self._job_of(token, said)
                    if not job_id:
                        raise SubmitFailed(
                            f"{said} and no job carries its token yet", permanent=False, maybe_submitted=True
                        )
                return job_id
            kind = refusal_kind(last.stderr, last.returncode)
            said = refusal_text(last.stderr, last.stdout) or last.describe()
            if kind == "permanent":
                raise SubmitFailed(f"sbatch refused the job: {said}", permanent=True)
            if kind == "limit":
                # Refused outright (no job was made): the watcher waits, not this loop.
                raise SubmitFailed(f"sbatch refused the job for a submit limit: {said}", permanent=False, limit=True)
        assert last is not None
        # Transient to the end: a time-out may still have submitted it.
        raise SubmitFailed(
            f"sbatch failed {self.submit_attempts} times: {refusal_text(last.stderr, last.stdout) or last.describe()}",
            permanent=False,
            maybe_submitted=may_hide_a_job(last.stderr, last.returncode),
        )

    async def _job_of(self, token: str, said: str) -> str:
        """The one job that carries `token` ('' for none), when `said` left it unknown whether
        sbatch made one; `SubmitFailed` when the lookup fails or finds more than one."""
        try:
            found = (await self.find_by_token([token], datetime.now(UTC) - timedelta(minutes=10))).get(token, [])
        except QueryFailed:
            raise SubmitFailed(
                f"{said} and the job could not be looked up by its token; it may have been submitted",
                permanent=False,
                maybe_submitted=True,
            ) from None
        if len(found) > 1:
            raise SubmitFailed(
                f"{said} but {len(found)} jobs carry token {token}: " + ", ".join(found),
                permanent=True,
                maybe_submitted=True,
            )
        return found[0] if found else ""

    # ---------------------------------------------------------------------- poll

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        self.commands_last_poll = []
        ids = list(dict.fromkeys(str(j) for j in job_ids))
        if not ids:
            return {}
        self.commands_last_poll.append("squeue")
        sq = await self._run(
            "squeue", ["--noheader", "--states=all", f"--jobs={','.join(ids)}", f"--format={SQUEUE_FORMAT}"]
        )
        queue: dict[str, QueueEntry] | None
        if sq.ok:
            queue = parse_squeue(sq.stdout)
        elif sq.returncode == 1 and "invalid job id" in sq.stderr.lower():
            queue = {}  # one id, unknown to squeue (purged or never there): ask sacct
        else:
            queue = None
        statuses: dict[str, JobStatus] = {}
        queued: dict[str, str] = {}  # job id -> squeue's state, folded
        ask: list[str] = []
        for job_id in ids:
            entry = queue.get(job_id) if queue is not None else None
            if entry is None:
                ask.append(job_id)
                continue
            queued[job_id] = state = _queue_state(entry.state)
            statuses[job_id] = job_status(job_id, state, reason=entry.reason)
            if state in TERMINAL_STATES:
                ask.append(job_id)
        sacct_ok = True
        if ask:
            self.commands_last_poll.append("sacct")
            sa = await self._run(
                "sacct", ["--parsable2", "--noheader", "-X", "-j", ",".join(ask), f"--format={FORMAT}"]
            )
            sacct_ok = sa.ok
            rows = rows_by_job(sa.stdout) if sa.ok else {}
            for job_id in ask:
                row = rows.get(job_id)
                if row is None:
                    if job_id not in statuses:
                        said = "sacct gave no row" if sa.ok else f"sacct failed: {sa.describe()}"
                        if queue is not None:
                            statuses[job_id] = JobStatus(job_id, "gone", note=f"gone from squeue; {said}")
                        else:
                            statuses[job_id] = JobStatus(job_id, "unknown", note=f"squeue failed; {said}")
                    continue
                state = normalize_state(row.state)
                known = queued.get(job_id, "")
                if known in TERMINAL_STATES and state not in TERMINAL_STATES:
                    state = known  # sacct has not caught up with squeue yet
                elif state not in TERMINAL_STATES:
                    state = _queue_state(state)
                final = state in TERMINAL_STATES and accounting_is_final(row)
                statuses[job_id] = job_status(job_id, state, row=row, final=final)
            if queue is None and not sacct_ok:
                raise QueryFailed(f"squeue and sacct both failed: {sq.describe()}; {sa.describe()}")
        return statuses

    # ------------------------------------------------------------- find by token

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        tokens = list(dict.fromkeys(tokens))
        found: dict[str, list[str]] = {t: [] for t in tokens}
        if not tokens:
            return found
        wanted = set(tokens)
        sq = await self._run(
            "squeue", ["--noheader", "--states=all", f"--name={','.join(tokens)}", f"--format={SQUEUE_FORMAT}"]
        )
        if not sq.ok:
            raise QueryFailed(f"cannot look up jobs by token: {sq.describe()}")
        rows: dict = {}
        since = since.astimezone(UTC)  # a naive time is local
        found_in = windows([(since - self.since_margin, datetime.now(UTC))], self.query_span)
        for window in found_in:
            sa = await self._run(
                "sacct",
                [
                    "--parsable2",
                    "--noheader",
                    "-X",
                    *window.sacct_args(until_now=window is found_in[-1]),
                    f"--name={','.join(tokens)}",
                    f"--format={FORMAT}",
                ],
            )
            if not sa.ok:
                raise QueryFailed(f"cannot look up jobs by token: {sa.describe()}")
            rows.update(rows_by_job(sa.stdout))
        for entry in parse_squeue(sq.stdout).values():
            if entry.name in wanted and entry.job_id not in found[entry.name]:
                found[entry.name].append(entry.job_id)
        for row in rows.values():
            for token in {row.job_name, row.comment} & wanted:
                if row.job_id not in found[token]:
                    found[token].append(row.job_id)
        for token in found:
            found[token].sort(key=lambda j: (len(j), j))
        return found

    async def launch_failure(self, job_id: str) -> str:
        """Why Slurm ended a job before its script started, where Slurm still says ('' if not)."""
        result = await self._run("scontrol", ["show", "job", "-o", str(job_id)])
        return launch_failure_note(result.stdout) if result.ok else ""

    async def ended_reason(self, job_id: str) -> str:
        """scontrol's Reason for a job it still remembers (MinJobAge after its end); '' if not."""
        result = await self._run("scontrol", ["show", "job", "-o", str(job_id)])
        fields = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item) if result.ok else {}
        return pending_reason(fields.get("Reason", ""))

    # -------------------------------------------------------------------- cancel

    async def cancel(self, job_id: str) -> None:
        result = await self._run("scancel", [str(job_id)])
        if result.ok:
            return
        text = result.stderr.lower()
        if "already completing or completed" in text or "invalid job id" in text:
            return
        raise QueryFailed(f"cannot cancel job {job_id}: {result.describe()}")
