"""Slurm accounting: batched sacct queries, job times, peak concurrency.

One `sacct -X -j id,id,... --parsable2` per batch of job ids (never one per job), and
one `sacct -X --name=tok,tok,...` per batch of intent tokens for the jobs no receipt names,
within each of the time windows around the intents (`query_windows`).
Rows are read by the sacct layer (`throughput_slurm.sacct`) and kept as Slurm
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
from datetime import datetime, timedelta

from throughput_audit.job_states import job_order
from throughput_slurm.environment import query_environment
from throughput_slurm.sacct import DEFAULT_SPAN, FORMAT, AccountingRow, Window, parse_rows, windows
from throughput_slurm.sacct import format_rows as format_rows  # accounting.txt is sacct's text

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
    return _batched(sorted(set(job_ids), key=job_order), sacct_argv, runner=runner, batch=batch)


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
