"""What squeue, sbatch and scontrol print and how the sweep reads it; sacct's state columns.

Output is requested with `--parsable2`/fixed `--format` strings (`SQUEUE_FORMAT`, and
sacct's `throughput_slurm.sacct.FORMAT`, read by that module for the sweep and the
audit alike), which are stable across Slurm releases (unlike `--json`), and parsed by the
pure functions here (tested on captured text, no Slurm needed):
  * `parse_squeue`: one entry per job id.
  * `normalize_state` / `_queue_state`: 'CANCELLED by 0' -> 'CANCELLED', and the many
    squeue states folded into PENDING, RUNNING or a terminal state.
  * `accounting_is_final`: sacct lags ~5 s after a job ends and shows JobName
    `allocation` with empty fields meanwhile, so a terminal row counts only once
    JobName, Partition, Timelimit, AllocTRES and End are filled in.
  * `job_status`: a job's state, reason and sacct row in the interface's words
    (`ENDED_AS`: each of Slurm's terminal states as the interface names it).
  * `CommandResult`: one command's answer; `says_error`: sacct printed an error on stderr.
  * `sbatch_job_id`: the job id in `sbatch --parsable`'s answer, wherever a site's wrapper
    puts the line that holds it among its own notices.
  * `classify_sbatch_error`: permanent (bad account, partition, QOS...) or a wait
    (submit limit, rate limit, controller unreachable, busy), from the explicit lists of
    `reasons`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from throughput_slurm.sacct import ENDED_AS, AccountingRow, job_accounting
from throughput_sweep.schedulers.base import JobState, JobStatus, Pending
from throughput_sweep.schedulers.slurm.reasons import (
    WAITS,
    budget_used_up,
    budget_wait,
    never_starts,
    pending_fix,
    pending_reason,
    refusal_kind,
)
from throughput_sweep.schedulers.slurm.states import TERMINAL_STATES

__all__ = [
    "SQUEUE_FORMAT",
    "QueueEntry",
    "ENDED_AS",
    "CommandResult",
    "accounting_is_final",
    "job_status",
    "classify_sbatch_error",
    "normalize_state",
    "launch_failure_note",
    "parse_squeue",
    "sbatch_job_id",
    "says_error",
]

# squeue: job id, state, reason, name; the name goes last (it may hold any character
# but a newline; our tokens are plain, but a foreign job's name must not break parsing).
SQUEUE_FORMAT = "%i|%T|%r|%j"

# squeue/sacct states that mean "waiting to run" (everything else non-terminal runs).
_PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})


# `sbatch --parsable`: the job id, and `;cluster` under a federation or with -M.
_PARSABLE = re.compile(r"(\d+)(?:;\S+)?")


def sbatch_job_id(stdout: str) -> str | None:
    """The job id of the one line of sbatch's output that is `JOBID` or `JOBID;cluster`.

    None when no line is, or more than one: a site's wrapper printed something else (the id
    in prose, a notice that is a number); only a lookup by the job's token can tell then.
    """
    ids = [m.group(1) for line in stdout.splitlines() if (m := _PARSABLE.fullmatch(line.strip()))]
    return ids[0] if len(ids) == 1 else None


def classify_sbatch_error(stderr: str, returncode: int | None = 1) -> bool:
    """True when the failure is permanent (retrying cannot help), False when it is a wait
    (a submit limit, a rate limit, a controller that did not answer): `reasons`."""
    return refusal_kind(stderr, returncode) == "permanent"


def normalize_state(raw: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED'; '' -> 'UNKNOWN'."""
    word = raw.strip().split(" ")[0].rstrip("+") if raw.strip() else ""
    return word or "UNKNOWN"


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


def launch_failure_note(scontrol_text: str) -> str:
    """What `scontrol show job -o ID` says about a job whose script never started.

    sacct (22.05) keeps neither the reason nor the output path; scontrol still knows both
    for MinJobAge seconds after the end, which is when the watcher first sees the job over.
    The output folder is blamed only when the job reached a node (NodeList or BatchHost
    set) and its reason is not one a pending job has: a job cancelled while pending has a
    StartTime (its end) but no NodeList, and it never tried to open its output file.
    """
    fields = dict(item.split("=", 1) for item in scontrol_text.split() if "=" in item)
    reason, stdout = fields.get("Reason", ""), fields.get("StdOut", "")
    node = fields.get("BatchHost", "") or fields.get("NodeList", "")
    pending_reason = never_starts(reason) or reason.split(",")[0] in WAITS
    started = node not in ("", "(null)", "None") and not pending_reason
    parts = []
    if reason and reason != "None":
        parts.append(f"Slurm gives the reason {reason}")
    if not started:
        parts.append("the job never reached a node")
    elif stdout:
        parts.append(
            f"its output file was to be {stdout}, which the node could not create (does that folder exist there?)"
        )
    return "; ".join(parts)


def pending(reason: str) -> Pending:
    """squeue's reason for a pending job, classified by `reasons`."""
    text = pending_reason(reason)
    never = never_starts(text)
    return Pending(
        text=text,
        never_starts=never,
        fix=pending_fix(text) if never else "",
        budget=budget_used_up(text) if never else budget_wait(text),
    )


def job_status(
    job_id: str, state: str, *, reason: str = "", row: AccountingRow | None = None, final: bool = False, note: str = ""
) -> JobStatus:
    """`state`: as `_queue_state` folds it (PENDING, RUNNING, a terminal state, UNKNOWN)."""
    word = normalize_state(state)
    neutral: JobState = (
        "pending" if word == "PENDING" else "running" if word == "RUNNING" else ENDED_AS.get(word, "unknown")
    )
    return JobStatus(
        job_id,
        neutral,
        said=word,
        pending=pending(reason) if neutral == "pending" else None,
        accounting=job_accounting(row) if row is not None else None,
        accounting_final=final,
        note=note,
    )


_ERROR = re.compile(r"\berror\b", re.IGNORECASE)


def says_error(stderr: str) -> bool:
    return bool(_ERROR.search(stderr))


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: did not finish within the time-out (killed)
    stdout: str
    stderr: str
    # sacct before Slurm 23.11.4 exits 0 when slurmdbd is down, saying so only on stderr:
    # its empty answer would read as "no such job" (and a token as never submitted).
    reported_error: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.reported_error

    def describe(self) -> str:
        what = "timed out" if self.returncode is None else f"exit {self.returncode}"
        if self.reported_error:
            what += " with an error"
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return f"{Path(self.argv[0]).name} {what}" + (f": {detail[-1]}" if detail else "")


_SLURMSTEPD_SAYS = "*** REASON:"  # slurmstepd's line in the job's output, after "CANCELLED AT ... DUE TO TIME LIMIT"


def slurmstepd_says(log: Path) -> str:
    """slurmstepd's reason line from the job's output file ('' when there is none): why Slurm
    ended a job early, such as an allocation budget used up while it ran."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.split(_SLURMSTEPD_SAYS, 1)[1].strip(" *") for line in text.splitlines() if _SLURMSTEPD_SAYS in line]
    return lines[-1] if lines else ""
