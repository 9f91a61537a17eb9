"""Slurm accounting: batched sacct queries, the allocation and state checks, peak concurrency.

One `sacct -X -j id,id,... --parsable2` per batch of job ids (never one per job), and
one `sacct -X --name=tok,tok,...` per batch of intent tokens for the jobs no receipt names.
Rows are kept as Slurm printed them (`AccountingRow`) and written to accounting.txt.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from throughput_schema import AccountingRow, ClusterProfile
from throughput_schema.local_jobs import slurm_duration

# sacct columns, in order; Comment is last because it is free text and may hold "|".
FIELDS: tuple[tuple[str, str], ...] = (
    ("JobID", "job_id"),
    ("JobName", "job_name"),
    ("State", "state"),
    ("ExitCode", "exit_code"),
    ("Partition", "partition"),
    ("Account", "account"),
    ("Timelimit", "timelimit"),
    ("AllocTRES", "alloc_tres"),
    ("ReqMem", "req_mem"),
    ("Start", "start"),
    ("End", "end"),
    ("Elapsed", "elapsed"),
    ("NodeList", "node_list"),
    ("Comment", "comment"),
)
BATCH = 100

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class AccountingUnavailable(RuntimeError):
    """sacct could not be run or did not answer; the message is one line."""


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)


@dataclass(frozen=True)
class Query:
    argv: list[str]
    output: str


def _argv(selection: list[str], sacct: str = "sacct", *, users: tuple[str, ...] = ()) -> list[str]:
    return [sacct, "-X", *users, "--parsable2", "--noheader", "--format=" + ",".join(name for name, _ in FIELDS), *selection]


def sacct_argv(job_ids: Sequence[str], sacct: str = "sacct") -> list[str]:
    return _argv(["-j", ",".join(job_ids)], sacct)


def query(job_ids: Iterable[str], *, runner: Runner | None = None, batch: int = BATCH) -> tuple[dict[str, AccountingRow], list[Query]]:
    """Accounting rows by job id, one sacct call per `batch` ids. Unknown ids are simply absent."""
    return _batched(sorted(set(job_ids), key=_job_sort_key), sacct_argv, runner=runner, batch=batch)


# Intent tokens are unique, so a wide window finds no stranger's job; it covers a login
# node's clock against slurmctld's and a created_at written without its offset.
SINCE_MARGIN = timedelta(days=1)


def since_argument(created_at: str) -> str:
    """Slurm's -S for jobs since a campaign's creation (an ISO time; naive is UTC, as the
    controller writes it), in local time as sacct reads it. ValueError if not a time."""
    when = datetime.fromisoformat(created_at)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - SINCE_MARGIN).astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def token_argv(tokens: Sequence[str], since: str, sacct: str = "sacct") -> list[str]:
    # --allusers: without -j sacct shows only the caller's jobs, and the auditor need not be
    # the user who ran the campaign.
    return _argv([f"--starttime={since}", "--endtime=now", "--name=" + ",".join(tokens)], sacct, users=("--allusers",))


def query_tokens(
    tokens: Iterable[str], since: str, *, runner: Runner | None = None, batch: int = BATCH
) -> tuple[dict[str, AccountingRow], list[Query]]:
    """Rows by job id of every job named by one of `tokens` since `since`, one sacct call per `batch` tokens."""
    return _batched(
        sorted(set(tokens)),
        lambda chunk: token_argv(chunk, since),
        runner=runner,
        batch=batch,
        keep=lambda row, chunk: row.job_name in chunk,
    )


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
        for row in parse(q.output):
            if keep(row, chunk):
                rows.setdefault(row.job_id, row)
    return rows, queries


def _call(argv: list[str], run: Runner) -> Query:
    try:
        proc = run(argv)
    except FileNotFoundError:
        raise AccountingUnavailable("sacct not found: the Slurm client tools are needed to audit a Slurm campaign") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise AccountingUnavailable(f"sacct failed to run: {exc}") from None
    if proc.returncode != 0:
        err = (proc.stderr or "").strip().splitlines()
        raise AccountingUnavailable(f"sacct exited {proc.returncode}: {err[-1] if err else 'no message'}")
    return Query(argv=argv, output=proc.stdout)


def parse(text: str) -> list[AccountingRow]:
    out = []
    n = len(FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < n:
            parts += [""] * (n - len(parts))
        parts = parts[: n - 1] + ["|".join(parts[n - 1 :])]
        out.append(AccountingRow(**{attr: value for (_, attr), value in zip(FIELDS, parts)}))
    return out


def _job_sort_key(job_id: str) -> tuple[int, str]:
    head = re.match(r"\d+", job_id)
    return (int(head.group()) if head else 0, job_id)


# ------------------------------------------------------------------------ comparisons


def parse_tres(tres: str) -> dict[str, str]:
    out = {}
    for item in tres.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def mem_mib(text: str) -> float | None:
    """'64G' / '65536M' / '64Gn' (per node) -> MiB; None if unreadable."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGTP]?)[nc]?\s*", text or "", re.IGNORECASE)
    if not m:
        return None
    return float(m.group(1)) * _MEM_UNITS[(m.group(2) or "M").upper()]


def timelimit_minutes(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS (or MM:SS) -> minutes; None for UNLIMITED or unreadable."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return days * 1440 + hours * 60 + minutes + seconds / 60


def parse_time(text: str) -> datetime | None:
    """Slurm's ISO timestamps (local time, naive); None for Unknown/None/empty."""
    try:
        when = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        return None
    if when.tzinfo is not None:  # compare everything as naive local time
        when = when.astimezone().replace(tzinfo=None)
    return when


def exit_status(exit_code: str) -> tuple[int | None, int | None]:
    code, _, sig = (exit_code or "").partition(":")
    try:
        return int(code), int(sig or 0)
    except ValueError:
        return None, None


# The Slurm end state each recorded outcome implies. Exit codes are the worker's (and the
# watchdog's) documented statuses, passed on by the batch script.
_EXPECTED: dict[str, tuple[tuple[str, int | None], ...]] = {
    "ok": (("COMPLETED", 0),),
    "cuda_oom": (("FAILED", 3),),
    "timeout": (("TIMEOUT", None), ("FAILED", 6)),
    "host_oom": (("OUT_OF_MEMORY", None), ("FAILED", 7)),
    "compile_error": (("FAILED", 4),),
    "nonfinite": (("FAILED", 5),),
    "crashed": (("FAILED", None),),
    "cancelled": (("CANCELLED", None), ("FAILED", 8)),
    "node_fail": (("NODE_FAIL", None), ("BOOT_FAIL", None), ("FAILED", 9)),
    "refused": (("CANCELLED", None),),  # pended for a reason that never clears; the watcher cancelled it
}


def expected_states(outcome: str) -> str:
    options = _EXPECTED.get(outcome)
    if not options:
        return "no Slurm state"
    text = " or ".join(s if code is None else f"{s} with exit {code}" for s, code in options)
    return f"{text} (or {'/'.join(LOST_AFTER_RESULT)} ending after the result was finished)"


def _head(state: str) -> str:
    """"CANCELLED by 0" -> "CANCELLED"."""
    return state.split()[0] if state else ""


def state_matches(outcome: str, state: str, exit_code: str) -> bool:
    head = _head(state)
    code, _ = exit_status(exit_code)
    for want, want_code in _EXPECTED.get(outcome, ()):
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
LOST_AFTER_RESULT = ("NODE_FAIL", "BOOT_FAIL")


def state_explains(outcome: str, row: AccountingRow, result_finished_at: str) -> bool:
    """The job's end state agrees with the result's outcome, or the job was lost after the result."""
    if state_matches(outcome, row.state, row.exit_code):
        return True
    if _head(row.state) not in LOST_AFTER_RESULT:
        return False
    done, end = parse_time(result_finished_at), parse_time(row.end)
    return done is not None and end is not None and done <= end


def allocation_problems(row: AccountingRow, profile: ClusterProfile) -> list[tuple[str, object, object]]:
    """(what, expected, actual) for each way the row differs from the campaign's profile."""
    problems: list[tuple[str, object, object]] = []
    tres = parse_tres(row.alloc_tres)
    gpus = tres.get("gres/gpu")
    if gpus is None:
        gpus = next((v for k, v in tres.items() if k.startswith("gres/gpu:")), None)
    if gpus != str(profile.gpus_per_job):
        problems.append(("gres/gpu", profile.gpus_per_job, gpus))
    if tres.get("cpu") != str(profile.cpus_per_task):
        problems.append(("cpu", profile.cpus_per_task, tres.get("cpu")))
    want_mem, got_mem = mem_mib(profile.mem), mem_mib(tres.get("mem", ""))
    if want_mem is None or got_mem is None or abs(want_mem - got_mem) > 0.5:
        problems.append(("mem", profile.mem, tres.get("mem")))
    limit = timelimit_minutes(row.timelimit)
    if limit is None or abs(limit - profile.time_limit_minutes) > 1e-9:
        problems.append(("timelimit", slurm_duration(profile.time_limit_minutes * 60), row.timelimit))
    if profile.account and row.account != profile.account:
        problems.append(("account", profile.account, row.account))
    if profile.partition and row.partition != profile.partition:
        problems.append(("partition", profile.partition, row.partition))
    return problems


@dataclass(frozen=True)
class Peak:
    jobs: int
    at: datetime | None
    job_ids: list[str]


def peak_concurrency(rows: Iterable[AccountingRow], *, now: datetime | None = None) -> Peak:
    """Most jobs running at one instant, from Start/End. A job ending at t and one starting at t do not overlap."""
    # At one timestamp (sacct has one-second resolution): ends of jobs that ran for a while
    # (0), then starts (1), then ends of jobs that started and ended within that second (2).
    events: list[tuple[datetime, int, str]] = []
    for row in rows:
        start = parse_time(row.start)
        if start is None:
            continue  # never started
        end = parse_time(row.end) or now or datetime.now()
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
    return best


def format_rows(rows: Iterable[AccountingRow]) -> str:
    header = "|".join(name for name, _ in FIELDS)
    lines = [header]
    for row in rows:
        lines.append("|".join(getattr(row, attr) for _, attr in FIELDS))
    return "\n".join(lines) + "\n"
