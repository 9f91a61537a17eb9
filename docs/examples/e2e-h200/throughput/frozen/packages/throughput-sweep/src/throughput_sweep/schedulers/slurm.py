"""Slurm through its command-line tools (sbatch, squeue, sacct, scancel) as anyio subprocesses.

Every command is an argv list; no shell is ever involved, so a profile value can only
ever be an argument. Output is read with `--parsable2`/fixed `--format` strings, which
are stable across Slurm releases (unlike `--json`), and parsed by the pure functions
`parse_squeue`, `parse_sacct` and `classify_sbatch_error` (tested on captured text).

Polling (one cycle = one `poll()` call):
  * ONE `squeue` for all ids. A job missing from squeue is "ask sacct", never "gone":
    squeue forgets jobs `MinJobAge` seconds after they end, and a single unknown id
    makes squeue exit 1 ("Invalid job id specified"), which is an empty answer here.
  * ONE `sacct -X -j id,id,...` for every id that squeue did not list or listed in a
    terminal state. A terminal row is `accounting_final` only when JobName, Partition,
    Timelimit and AllocTRES are filled in (sacct lags ~5 s after a job ends and shows
    JobName `allocation` with empty fields meanwhile), so keep polling a finished job
    until its status says final.
  * No retries inside a cycle: the watcher's next cycle is the retry. When squeue fails
    every id goes to sacct (which also knows PENDING/RUNNING jobs); ids that no query
    could answer come back as state `UNKNOWN`. `poll` raises `QueryFailed` only when no
    query answered at all.
  * `commands_last_poll` lists the commands (program names) of the latest cycle, and
    `command_counts` counts every command issued since construction, so a test can
    assert "at most one squeue and one sacct per cycle".

Submission: `sbatch --parsable --no-requeue` with resources on the command line (the batch script has
no #SBATCH lines). A transient failure (controller unreachable, socket time-out, busy)
may hide an accepted job, so before every retry the job is looked up by its token (the
job name); if the lookup cannot prove absence the retry is skipped and `SubmitFailed`
is raised with `maybe_submitted=True`: the caller keeps the intent and reconciles it
by token later. Permanent failures (bad account, partition, QOS, constraints...) raise
`SubmitFailed(permanent=True)` at once.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Sequence

import anyio

from throughput_schema import AccountingRow, ClusterProfile
from throughput_sweep.schedulers.base import TERMINAL_STATES, JobStatus, QueryFailed, SubmitFailed

__all__ = [
    "SACCT_FIELDS",
    "SQUEUE_FORMAT",
    "CommandResult",
    "SlurmScheduler",
    "accounting_is_final",
    "classify_sbatch_error",
    "normalize_state",
    "parse_sacct",
    "parse_squeue",
    "sbatch_argv",
]

SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "Partition",
    "Account",
    "Timelimit",
    "AllocTRES",
    "ReqMem",
    "Start",
    "End",
    "Elapsed",
    "Comment",
    "NodeList",
)
_ROW_FIELDS = (
    "job_id",
    "job_name",
    "state",
    "exit_code",
    "partition",
    "account",
    "timelimit",
    "alloc_tres",
    "req_mem",
    "start",
    "end",
    "elapsed",
    "comment",
    "node_list",
)
# squeue: job id, state, reason, name; the name goes last (it may hold any character
# but a newline; our tokens are plain, but a foreign job's name must not break parsing).
SQUEUE_FORMAT = "%i|%T|%r|%j"

# squeue/sacct states that mean "waiting to run" (everything else non-terminal runs).
_PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})

_PERMANENT = re.compile(
    r"invalid account|invalid partition|invalid qos|qos|association|"
    r"invalid generic resource|invalid gres|gres specification|"
    r"requested node configuration is not available|node count specification invalid|"
    r"memory specification can not be satisfied|invalid feature specification|"
    r"invalid time limit|requested time limit is invalid|time limit specification|"
    r"access/permission denied|not permitted|permission denied|invalid user|"
    r"unrecognized option|invalid option|unable to open file|no such file|"
    r"invalid --|invalid job|batch job submission failed: invalid|"
    r"more processors requested than permitted|cpu count per node can not be satisfied|"
    r"account has insufficient|partition .* not available",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"socket timed out|timed out|unable to contact slurm controller|"
    r"slurm controller not responding|connection refused|connection reset|"
    r"temporarily unavailable|temporarily unable|try again|busy|zero bytes were transmitted|"
    r"transport endpoint|communication connection failure|slurm_persist_conn|"
    r"slurmctld.*(down|not responding)|resource temporarily unavailable|"
    r"job submit/allocate failed: (slurm )?(temporarily|controller)",
    re.IGNORECASE,
)


def classify_sbatch_error(stderr: str, returncode: int | None = 1) -> bool:
    """True when the failure is permanent (retrying cannot help), False when transient.

    Transient wins over permanent only for clear communication failures; an error we
    do not recognise is permanent (a clear message beats blind retries).
    `returncode=None` means sbatch itself did not finish in time: transient.
    """
    if returncode is None:
        return False
    text = stderr.strip()
    if _TRANSIENT.search(text) and not re.search(r"invalid account|invalid partition|invalid qos", text, re.I):
        return False
    return True


def normalize_state(raw: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED'; '' -> 'UNKNOWN'."""
    word = raw.strip().split(" ")[0].rstrip("+") if raw.strip() else ""
    return word or "UNKNOWN"


def parse_sacct(text: str) -> dict[str, AccountingRow]:
    """Rows of `sacct --parsable2 --noheader -X --format=<SACCT_FIELDS>` keyed by job id.

    Step rows (`123.batch`, `123.extern`) are skipped if present; when a job id appears
    twice (requeue) the last row wins. A Comment containing '|' is rejoined.
    """
    rows: dict[str, AccountingRow] = {}
    n = len(SACCT_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < n:
            continue
        if len(parts) > n:  # a '|' inside the Comment (index 12): rejoin it
            extra = len(parts) - n
            parts = parts[:12] + ["|".join(parts[12 : 13 + extra])] + parts[13 + extra :]
        values = dict(zip(_ROW_FIELDS, parts))
        job_id = values["job_id"]
        if "." in job_id:
            continue
        rows[job_id] = AccountingRow(**values)
    return rows


@dataclass(frozen=True)
class QueueEntry:
    job_id: str
    state: str
    reason: str
    name: str


def parse_squeue(text: str) -> dict[str, QueueEntry]:
    """Lines of `squeue --noheader --format=SQUEUE_FORMAT`, keyed by job id."""
    found: dict[str, QueueEntry] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4:
            continue
        job_id, state, reason, name = (p.strip() for p in parts)
        found[job_id] = QueueEntry(job_id=job_id, state=state, reason=reason, name=name)
    return found


def accounting_is_final(row: AccountingRow) -> bool:
    """Terminal state and the fields sacct fills in late are present."""
    if normalize_state(row.state) not in TERMINAL_STATES:
        return False
    if not (row.job_name and row.partition and row.timelimit and row.alloc_tres):
        return False
    if row.job_name == "allocation" or row.end in ("", "Unknown"):
        return False
    return True


def _queue_state(state: str) -> str:
    state = normalize_state(state)
    if state in _PENDING_STATES:
        return "PENDING"
    if state in TERMINAL_STATES or state == "UNKNOWN":
        return state
    return "RUNNING"  # RUNNING, COMPLETING, CONFIGURING, SUSPENDED, SIGNALING, STAGE_OUT...


def sbatch_argv(profile: ClusterProfile, script: Path, *, token: str, workdir: Path, sbatch: str = "sbatch") -> list[str]:
    """The exact sbatch command line for one job (resources here, not in the script)."""
    # --no-requeue: after a node failure Slurm would otherwise rerun the job under the same id
    # in the same attempt folder, measuring the point again behind the watcher's back.
    argv = [sbatch, "--parsable", "--no-requeue", f"--job-name={token}", f"--comment={token}"]
    if profile.account:
        argv.append(f"--account={profile.account}")
    if profile.partition:
        argv.append(f"--partition={profile.partition}")
    argv += [
        f"--gpus={profile.gpus_per_job}",
        f"--cpus-per-task={profile.cpus_per_task}",
        *([f"--mem={profile.mem}"] if profile.mem else []),
        f"--time={profile.time_limit_minutes}",
        f"--output={Path(workdir) / 'slurm-%j.out'}",
        f"--chdir={workdir}",
        *profile.extra_sbatch_args,
        str(script),
    ]
    return argv


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: did not finish within the time-out (killed)
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        what = "timed out" if self.returncode is None else f"exit {self.returncode}"
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return f"{Path(self.argv[0]).name} {what}" + (f": {detail[-1]}" if detail else "")


class SlurmScheduler:
    """The `Scheduler` interface on Slurm. `slots` is the profile's concurrency limit."""

    name = "slurm"

    def __init__(
        self,
        profile: ClusterProfile,
        *,
        submit_attempts: int = 3,
        backoff_seconds: float = 2.0,
        command_timeout: float = 60.0,
        since_margin: timedelta = timedelta(hours=1),
        commands: dict[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self.slots = profile.max_concurrent_jobs
        self.submit_attempts = max(1, submit_attempts)
        self.backoff_seconds = backoff_seconds
        self.command_timeout = command_timeout
        self.since_margin = since_margin
        self._cmd = {"sbatch": "sbatch", "squeue": "squeue", "sacct": "sacct", "scancel": "scancel"}
        self._cmd.update(commands or {})
        self.command_counts: Counter[str] = Counter()
        self.commands_last_poll: list[str] = []

    # ------------------------------------------------------------------ commands

    async def _run(self, key: str, args: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        argv = [self._cmd[key], *args]
        self.command_counts[key] += 1
        try:
            with anyio.fail_after(timeout or self.command_timeout):
                proc = await anyio.run_process(argv, check=False)
        except TimeoutError:
            return CommandResult(argv, None, "", f"{key} did not answer within {timeout or self.command_timeout:.0f} s")
        except OSError as exc:  # command missing, not executable
            return CommandResult(argv, 127, "", f"cannot run {argv[0]}: {exc.strerror or exc}")
        return CommandResult(
            argv, proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        )

    # -------------------------------------------------------------------- submit

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        argv = sbatch_argv(self.profile, Path(script), token=token, workdir=Path(workdir))[1:]
        last: CommandResult | None = None
        for attempt in range(1, self.submit_attempts + 1):
            if attempt > 1:
                await anyio.sleep(self.backoff_seconds * 2 ** (attempt - 2))
                # The failed call may still have reached the controller: look first.
                try:
                    found = (await self.find_by_token([token], datetime.now() - timedelta(days=1))).get(token, [])
                except QueryFailed:
                    raise SubmitFailed(
                        f"sbatch failed ({last.describe()}) and the job could not be looked up by its token; "
                        "it may have been submitted",
                        permanent=False,
                        maybe_submitted=True,
                    ) from None
                if len(found) == 1:
                    return found[0]
                if len(found) > 1:
                    raise SubmitFailed(
                        f"sbatch failed ({last.describe()}) but {len(found)} jobs carry token {token}: "
                        + ", ".join(found),
                        permanent=True,
                        maybe_submitted=True,
                    )
            last = await self._run("sbatch", argv)
            if last.ok:
                job_id = last.stdout.strip().splitlines()[-1].split(";")[0].strip() if last.stdout.strip() else ""
                if not job_id.isdigit():
                    raise SubmitFailed(
                        f"sbatch answered without a job id: {last.stdout.strip()!r}", permanent=False, maybe_submitted=True
                    )
                return job_id
            if classify_sbatch_error(last.stderr, last.returncode):
                raise SubmitFailed(f"sbatch refused the job: {last.describe()}", permanent=True)
        assert last is not None
        # Transient to the end: a time-out may still have submitted it.
        raise SubmitFailed(
            f"sbatch failed {self.submit_attempts} times: {last.describe()}",
            permanent=False,
            maybe_submitted=last.returncode is None or bool(_TRANSIENT.search(last.stderr)),
        )

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
        ask: list[str] = []
        for job_id in ids:
            entry = queue.get(job_id) if queue is not None else None
            if entry is None:
                ask.append(job_id)
                continue
            state = _queue_state(entry.state)
            statuses[job_id] = JobStatus(job_id, state, reason=entry.reason if state == "PENDING" else "")
            if state in TERMINAL_STATES:
                ask.append(job_id)
        sacct_ok = True
        if ask:
            self.commands_last_poll.append("sacct")
            sa = await self._run(
                "sacct",
                ["--parsable2", "--noheader", "-X", "-j", ",".join(ask), f"--format={','.join(SACCT_FIELDS)}"],
            )
            sacct_ok = sa.ok
            rows = parse_sacct(sa.stdout) if sa.ok else {}
            for job_id in ask:
                row = rows.get(job_id)
                known = statuses.get(job_id)
                if row is None:
                    if known is None:
                        statuses[job_id] = JobStatus(job_id, "UNKNOWN")
                    continue
                state = normalize_state(row.state)
                if known is not None and known.state in TERMINAL_STATES and state not in TERMINAL_STATES:
                    state = known.state  # sacct has not caught up with squeue yet
                elif state not in TERMINAL_STATES:
                    state = _queue_state(state)
                statuses[job_id] = JobStatus(
                    job_id,
                    state,
                    accounting=row,
                    accounting_final=state in TERMINAL_STATES and accounting_is_final(row),
                )
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
        start = _slurm_time(since - self.since_margin)
        sa = await self._run(
            "sacct",
            [
                "--parsable2",
                "--noheader",
                "-X",
                f"--starttime={start}",
                "--endtime=now",
                f"--name={','.join(tokens)}",
                f"--format={','.join(SACCT_FIELDS)}",
            ],
        )
        if not sa.ok:
            raise QueryFailed(f"cannot look up jobs by token: {sa.describe()}")
        for entry in parse_squeue(sq.stdout).values():
            if entry.name in wanted and entry.job_id not in found[entry.name]:
                found[entry.name].append(entry.job_id)
        for row in parse_sacct(sa.stdout).values():
            for token in {row.job_name, row.comment} & wanted:
                if row.job_id not in found[token]:
                    found[token].append(row.job_id)
        for token in found:
            found[token].sort(key=lambda j: (len(j), j))
        return found

    # -------------------------------------------------------------------- cancel

    async def cancel(self, job_id: str) -> None:
        result = await self._run("scancel", [str(job_id)])
        if result.ok:
            return
        text = result.stderr.lower()
        if "already completing or completed" in text or "invalid job id" in text:
            return
        raise QueryFailed(f"cannot cancel job {job_id}: {result.describe()}")


def _slurm_time(when: datetime) -> str:
    """Slurm's -S/-E format in the local time zone (what sacct interprets)."""
    if when.tzinfo is not None:
        when = when.astimezone().replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def slurm_minutes(text: str) -> float | None:
    """'00:14:00', '1-00:00:00', '14:00' (mm:ss), 'UNLIMITED' -> minutes (None if unknown)."""
    text = text.strip()
    if not text or text in ("UNLIMITED", "Partition_Limit", "INVALID"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return days * 1440 + h * 60 + m + s / 60

