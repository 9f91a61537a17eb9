"""Slurm accounting: batched sacct queries, the allocation and state checks, peak concurrency.

One `sacct -X -j id,id,... --parsable2` per batch of job ids (never one per job), and
one `sacct -X --name=tok,tok,...` per batch of intent tokens for the jobs no receipt names,
within each of the time windows around the intents (`query_windows`).
Rows are read by the schema's sacct layer (`throughput_schema.sacct`) and kept as Slurm
printed them (`AccountingRow`), their times in UTC with the offset, and written to
accounting.txt.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from throughput_schema import AccountingRow
from throughput_schema.sacct import DEFAULT_SPAN, FORMAT, Window, parse_rows, windows
from throughput_schema.sacct import format_rows as format_rows  # accounting.txt is sacct's text
from throughput_schema.slurm_env import query_environment
from throughput_sweep.schedulers.slurm import states as slurm_states

BATCH = 100

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class AccountingUnavailable(RuntimeError):
    """sacct could not be run, failed, or said it had no answer; the message is one line."""


def slurm_env() -> dict[str, str]:
    """The environment every Slurm client call of the audit runs with: the schema's policy
    (SLURM_TIME_FORMAT=standard, so a shell's `relative` cannot hide dates; TZ=UTC, so the
    auditor's zone cannot move them; no inherited SACCT_*/SLURM_* option that would change
    what sacct selects or prints)."""
    return query_environment(os.environ)


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False, env=slurm_env())


@dataclass(frozen=True)
class Query:
    argv: list[str]
    output: str


def _argv(selection: list[str], sacct: str = "sacct", *, users: tuple[str, ...] = ()) -> list[str]:
    return [sacct, "-X", *users, "--parsable2", "--noheader", "--format=" + FORMAT, *selection]


def sacct_argv(job_ids: Sequence[str], sacct: str = "sacct") -> list[str]:
    return _argv(["-j", ",".join(job_ids)], sacct)


def query(
    job_ids: Iterable[str], *, runner: Runner | None = None, batch: int = BATCH
) -> tuple[dict[str, AccountingRow], list[Query]]:
    """Accounting rows by job id, one sacct call per `batch` ids. Unknown ids are simply absent."""
    return _batched(sorted(set(job_ids), key=_job_sort_key), sacct_argv, runner=runner, batch=batch)


def token_argv(tokens: Sequence[str], window: Window, sacct: str = "sacct") -> list[str]:
    # --allusers: without -j sacct shows only the caller's jobs, and the auditor need not be
    # the user who ran the campaign.
    return _argv([*window.sacct_args(), "--name=" + ",".join(tokens)], sacct, users=("--allusers",))


def query_tokens(
    times: Mapping[str, tuple[datetime, datetime]],
    span: timedelta = DEFAULT_SPAN,
    *,
    runner: Runner | None = None,
    batch: int = BATCH,
) -> tuple[dict[str, AccountingRow], list[Query], list[Window]]:
    """Rows by job id of every job named by one of the tokens, each looked for in the
    windows (none wider than `span`) that overlap its times (`query_windows.around`): one
    sacct call per `batch` tokens within each window. Also the queries and the windows."""
    found = windows(times.values(), span)
    rows: dict[str, AccountingRow] = {}
    queries: list[Query] = []
    for window in found:
        inside = sorted(token for token, (start, end) in times.items() if window.overlaps(start, end))
        more, asked = _batched(
            inside,
            functools.partial(_token_argv_in, window),
            runner=runner,
            batch=batch,
            keep=lambda row, chunk: row.job_name in chunk,
        )
        for job_id, row in more.items():
            rows.setdefault(job_id, row)
        queries += asked
    return rows, queries, found


def _token_argv_in(window: Window, tokens: list[str]) -> list[str]:
    return token_argv(tokens, window)


def _batched(
    keys: list[str],
    argv_of: Callable[[list[str]], list[str]],
    *,
    runner: Runner | None,
    batch: int,
    keep: Callable[[AccountingRow, list[str]], bool] = lambda row, chunk: True,
) -> tuple[dict[str, AccountingRow], list[Query]]:
    """One sacct call per `batch` keys; the first row per job id that `keep` accepts."""
    rows: dict[str, AccountingRow] = {}
    queries: list[Query] = []
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        q = _call(argv_of(chunk), runner or _run)
        queries.append(q)
        for row in parse_rows(q.output):
            if keep(row, chunk):
                rows.setdefault(row.job_id, row)
    return rows, queries


def _call(argv: list[str], run: Runner) -> Query:
    try:
        proc = run(argv)
    except FileNotFoundError:
        raise AccountingUnavailable(
            "sacct not found: the Slurm client tools are needed to audit a Slurm campaign"
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise AccountingUnavailable(f"sacct failed to run: {exc}") from None
    err = (proc.stderr or "").strip().splitlines()
    if proc.returncode != 0:
        raise AccountingUnavailable(f"sacct exited {proc.returncode}: {err[-1] if err else 'no message'}")
    # Slurm before 23.11.4 exits 0 when slurmdbd does not answer, with only an error on
    # stderr and no rows: that is no answer, not an empty one.
    errors = [line for line in err if _ERROR.search(line)]
    if errors:
        raise AccountingUnavailable(f"sacct exited 0 but said: {errors[-1].strip()}")
    return Query(argv=argv, output=proc.stdout)


_ERROR = re.compile(r"\b(error|fatal)\b", re.IGNORECASE)


def _job_sort_key(job_id: str) -> tuple[int, str]:
    head = re.match(r"\d+", job_id)
    return (int(head.group()) if head else 0, job_id)


# ------------------------------------------------------------------------------ times

# What sacct prints for a time that has not happened (a job not started, not ended).
NOT_YET = ("", "Unknown", "None")
# A full date and time: SLURM_TIME_FORMAT=relative or a custom format prints "19:19:41"
# or "Tue 19:19", which Python would read as today, or not at all.
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def job_time(text: str) -> datetime | None:
    """An ISO timestamp as an instant (UTC): a time without an offset (a receipt recorded
    before times carried one, an older local registry) is read as local. None where it has
    not happened yet.
    ValueError, naming the text, for anything else: a time that does not parse is never
    read as absent."""
    text = (text or "").strip()
    if text in NOT_YET:
        return None
    try:
        if not _DATED.match(text):
            raise ValueError
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date and time") from None
    # Instants, not local wall times: around a daylight-saving change local times repeat.
    return when.astimezone(UTC)


def parse_time(text: str) -> datetime | None:
    """`job_time`, with unreadable text as None: for times whose reading is checked elsewhere."""
    try:
        return job_time(text)
    except ValueError:
        return None


def time_problems(row: AccountingRow) -> list[str]:
    """'start ...' / 'end ...' for each of the row's times that is there but does not parse."""
    problems = []
    for field in ("start", "end"):
        try:
            job_time(getattr(row, field))
        except ValueError as exc:
            problems.append(f"{field} {exc}")
    return problems


def exit_status(exit_code: str) -> tuple[int | None, int | None]:
    code, _, sig = (exit_code or "").partition(":")
    try:
        return int(code), int(sig or 0)
    except ValueError:
        return None, None


def expected_states(outcome: str) -> str:
    options = slurm_states.expected_states(outcome)
    if not options:
        return "no Slurm state"
    text = " or ".join(s if code is None else f"{s} with exit {code}" for s, code in options)
    return f"{text} (or {'/'.join(LOST_AFTER_RESULT)} ending after the result was finished)"


def state_matches(outcome: str, state: str, exit_code: str) -> bool:
    head = slurm_states.state_word(state)
    code, _ = exit_status(exit_code)
    for want, want_code in slurm_states.expected_states(outcome):
        if head == want and (want_code is None or code == want_code):
            if outcome == "crashed" and code == 0:
                continue
            return True
    return False


# A job lost while it was finishing: its worker had written a complete result, then the
# node failed (Slurm) or the machine went away with the local scheduler's wrapper, so the
# accounting says NODE_FAIL although the measurement is whole. The controller keeps such
# a result; the audit accepts the pair only when the result was finished no later than
# the job's recorded end (a result from after the job cannot be the job's).
LOST_AFTER_RESULT = tuple(s for s, m in slurm_states.STATES.items() if m.outcome == "node_fail")


def state_explains(outcome: str, row: AccountingRow, result_finished_at: str) -> bool:
    """The job's end state agrees with the result's outcome, or the job was lost after the result."""
    if state_matches(outcome, row.state, row.exit_code):
        return True
    if slurm_states.state_word(row.state) not in LOST_AFTER_RESULT:
        return False
    done, end = parse_time(result_finished_at), parse_time(row.end)
    return done is not None and end is not None and done <= end


@dataclass(frozen=True)
class Peak:
    jobs: int
    at: datetime | None
    job_ids: list[str]
    counted: int = 0  # jobs whose start (and end, if ended) were read
    unreadable: tuple[str, ...] = ()  # "job 42: start '19:19:41' is not a date and time ..."


def peak_concurrency(rows: Iterable[AccountingRow], *, now: datetime | None = None) -> Peak:
    """Most jobs running at one instant, from Start/End. A job ending at t and one starting at t do not overlap."""
    # At one timestamp (sacct has one-second resolution): ends of jobs that ran for a while
    # (0), then starts (1), then ends of jobs that started and ended within that second (2).
    events: list[tuple[datetime, int, str]] = []
    unreadable: list[str] = []
    for row in rows:
        bad = time_problems(row)
        if bad:
            unreadable.append(f"job {row.job_id}: " + "; ".join(bad))
            continue
        start = job_time(row.start)
        if start is None:
            continue  # never started
        end = job_time(row.end) or now or datetime.now(UTC)
        events.append((start, 1, row.job_id))
        events.append((max(end, start), 0 if end > start else 2, row.job_id))
    events.sort(key=lambda e: (e[0], e[1]))
    running: set[str] = set()
    best = Peak(0, None, [])
    for when, kind, job in events:
        if kind == 1:
            running.add(job)
            if len(running) > best.jobs:
                best = Peak(len(running), when, sorted(running, key=_job_sort_key))
        else:
            running.discard(job)
    return Peak(best.jobs, best.at, best.job_ids, counted=len(events) // 2, unreadable=tuple(unreadable))
