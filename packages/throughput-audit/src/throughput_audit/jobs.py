"""The checks every job gets against its scheduler's own record of it, read by the
scheduler's backend into the project's words (`JobAccounting`): sacct's row on Slurm, the
registry on the local scheduler. Each reader passes its `Source` (the checks' name prefix
"slurm.", "local."; how messages name the record; how a user skips those checks) and the
one thing that stays in the scheduler's words, the names it recorded for the job.

- identity: one of the job's recorded names carries the attempt's token;
- state: its end state and exit code agree with the result's outcome;
- worker_times: every timestamp a worker wrote lies within the job's start and end;
- receipt_accounting: every field of the receipt's accounting, which collect publishes,
  equals the scheduler's record read now (times as instants, written with any offset).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from throughput_audit import job_states
from throughput_audit.campaign import AttemptRecord, kind
from throughput_audit.findings import Checks
from throughput_schema import WorkerResult
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.layout import ACCOUNTING, BASELINE, RECEIPT, RESULT
from throughput_schema.outcomes import written_by_scheduler

# Both clocks print whole seconds: a worker's time may read up to a second off the job's.
GRANULARITY = timedelta(seconds=1)
# A receipt's accounting recorded before the job's end (published as not final) may hold
# a record the scheduler had not filled in yet (sacct's JobName "allocation", no
# partition): only its job id must agree. `raw` is the backend's text of the same record.
_NOT_FINAL = ("job_id",)
_FINAL = tuple(f for f in JobAccounting.__struct_fields__ if f != "raw")
_TIMES = ("start", "end")


@dataclass(frozen=True)
class Source:
    """Whose record the jobs are checked against, in that scheduler's own words."""

    prefix: str  # the checks' names start with it: "slurm.state"
    name: str  # "sacct": "equals sacct", "times in sacct"
    skip: str = ""  # how to skip these checks, where the audit has a flag for it
    jobs: str = "jobs"  # what the peak message counts: "peak 3 jobs running at once"


def check_job(
    source: Source,
    r: AttemptRecord,
    accounting: JobAccounting,
    checks: Checks,
    *,
    names: dict[str, str],
    skew: float = 0.0,
) -> int:
    """`accounting`: the scheduler's record read by its backend, which the receipt's copy
    must equal. `names`: what the scheduler recorded as the job's names, by what it calls
    them ({"name": ..., "comment": ...} in sacct), one of which must carry the token.
    Returns how many worker results were compared with the job's times. `skew`: the node's
    clock's seconds ahead of the scheduler's (`clock_skew`), removed from the workers' times
    before they are compared."""
    file = r.file(RECEIPT)
    job_id = accounting.job_id
    receipt = r.attempt.receipt
    assert receipt is not None, "an attempt is checked against the job its receipt names"
    token = r.attempt.intent.token if r.attempt.intent else receipt.token
    checks.expect(
        f"{source.prefix}.identity",
        any(token in name for name in names.values()),
        file,
        f"{file}: job {job_id} has "
        + ", ".join(f"{what} {name!r}" for what, name in names.items())
        + f"; the intent's token is {token!r}",
        job_id=job_id,
        names=names,
        token=token,
    )
    res = r.attempt.result
    if res is not None:
        k = kind(res)
        ok = job_states.state_explains(k, accounting, _on_scheduler_clock(res.finished_at, skew))
        checks.expect(
            f"{source.prefix}.state",
            ok,
            file,
            f"{file}: job {job_id} ended {_ending(accounting)}; result.json outcome {k} "
            + (f"implies {job_states.expected_text(k)}" if not ok else "agrees")
            + _someone_else(accounting),
            job_id=job_id,
            state=accounting.state,
            exit_code=accounting.exit_code,
            outcome=k,
        )
    lost = accounting.state == "node_fail"
    compared = check_worker_times(source, r, accounting, checks, skew=skew, lost=lost)
    check_receipt_copy(source, r, accounting, checks)
    return compared


def _ending(acc: JobAccounting) -> str:
    """'failed exit 3', 'cancelled signal 15', 'running'."""
    text: str = acc.state
    if acc.exit_code is not None:
        text += f" exit {acc.exit_code}"
    return text + (f" signal {acc.signal}" if acc.signal else "")


# Ended from outside: a retry, never a boundary.
_BY_SOMEONE_ELSE = {"cancelled": "was cancelled", "preempted": "was preempted for other work"}


def _someone_else(acc: JobAccounting) -> str:
    said = _BY_SOMEONE_ELSE.get(acc.state)
    return f" (the job {said}: not a boundary; retry the point with run --resume --retry-failed)" if said else ""


def check_receipt_copy(source: Source, r: AttemptRecord, row: JobAccounting, checks: Checks) -> None:
    receipt = r.attempt.receipt
    assert receipt is not None, "an attempt is checked against the job its receipt names"
    recorded = receipt.accounting
    if recorded is None:
        return
    file = r.file(RECEIPT)
    fields = _FINAL if receipt.accounting_final else _NOT_FINAL
    differ = [f for f in fields if not _same(f, getattr(recorded, f), getattr(row, f))]
    checks.expect(
        f"{source.prefix}.receipt_accounting",
        not differ,
        file,
        f"{file}: the receipt's accounting of job {row.job_id} "
        + (
            "; ".join(f"{f} {getattr(recorded, f)!r}, {source.name} says {getattr(row, f)!r}" for f in differ)
            if differ
            else f"equals {source.name} ({'final' if receipt.accounting_final else 'recorded while running'}: "
            f"{row.state} exit {row.exit_code}, elapsed {row.elapsed_seconds} s)"
        ),
        job_id=row.job_id,
        differ={f: {"receipt": getattr(recorded, f), "scheduler": getattr(row, f)} for f in differ},
    )


def _same(field: str, recorded: object, now: object) -> bool:
    """A time is the same instant, written with any offset; every other field is equal."""
    if field not in _TIMES or recorded == now:
        return recorded == now
    instant = job_states.parse_time(str(now))
    try:
        when = datetime.fromisoformat(str(recorded))
    except ValueError:
        return False
    return instant is not None and when.tzinfo is not None and when == instant


def worker_results(r: AttemptRecord) -> list[tuple[str, WorkerResult]]:
    """Results written inside the job. One the controller wrote from the final accounting
    for a job that left none (`written_by_scheduler`, whatever the scheduler) is dated after it."""
    found = [(r.file(RESULT), r.attempt.result), (r.file(BASELINE), r.attempt.baseline)]
    return [(file, res) for file, res in found if res is not None and not written_by_scheduler(res.outcome)]


def _on_scheduler_clock(text: str, skew: float) -> str:
    """A node's time as the scheduler's clock read it then (the text as it is where not a time)."""
    at = job_states.parse_time(text) if text and skew else None
    return (at - timedelta(seconds=skew)).isoformat() if at is not None else text


def check_worker_times(
    source: Source, r: AttemptRecord, acc: JobAccounting, checks: Checks, *, skew: float = 0.0, lost: bool = False
) -> int:
    """Each worker-written result's times within its job's; returns how many were compared.
    A job time that is missing or does not parse fails, naming the field and the text.
    `lost`: the job's machine failed, maybe after the worker's result (its run not compared
    with the job's elapsed time)."""
    found = worker_results(r)
    if not found:
        return 0
    bad = job_states.time_problems(acc)
    start, end = job_states.instant(acc.start), job_states.instant(acc.end)
    elapsed = acc.elapsed_seconds  # None: not known, the run's length is not compared
    for file, res in found:
        problems = [f"job {acc.job_id}'s {p} in {source.name}" for p in bad]
        if not bad and (start is None or end is None):
            missing = "start" if start is None else "end"
            problems.append(
                f"job {acc.job_id} has no {missing} time in {source.name}, yet its worker wrote this result"
            )
        when: dict[str, datetime] = {}
        for what, text in {"started_at": res.started_at, "finished_at": res.finished_at}.items():
            at = job_states.parse_time(text) if text else None
            at = at - timedelta(seconds=skew) if at is not None else None
            if at is None:
                problems.append(f"{what} {text!r} is not a time (a worker always records when it ran)")
            elif start is not None and end is not None and not start - GRANULARITY <= at <= end + GRANULARITY:
                problems.append(f"{what} {text} lies outside the job's {acc.start} .. {acc.end}")
            else:
                when[what] = at
        if not problems and elapsed is not None and not lost:
            ran = (when["finished_at"] - when["started_at"]).total_seconds()
            if ran > elapsed + GRANULARITY.total_seconds():
                problems.append(f"the worker ran {ran:.0f} s, longer than the job's elapsed {elapsed:g} s")
        checks.expect(
            f"{source.prefix}.worker_times",
            not problems,
            file,
            f"{file}: "
            + ("; ".join(problems) if problems else f"worker ran {res.started_at} .. {res.finished_at}")
            + f" (job {acc.job_id}: {acc.start or '?'} .. {acc.end or '?'}, elapsed "
            + (f"{elapsed:g} s" if elapsed is not None else "?")
            + (f"; the node's clock skew of {skew:+.1f} s removed)" if skew else ")"),
            job_id=acc.job_id,
            started_at=res.started_at,
            finished_at=res.finished_at,
            job_start=acc.start,
            job_end=acc.end,
            skew_seconds=round(skew, 3),
        )
    return len(found)


def check_worker_times_ran(source: Source, jobs: int, compared: int, checks: Checks) -> None:
    """A campaign whose jobs ran, yet no worker time was compared, checked nothing: say so."""
    if jobs and not compared:
        checks.fail(
            f"{source.prefix}.worker_times",
            "",
            f"none of the campaign's {jobs} jobs has a result its worker wrote: the workers' times were checked against nothing"
            + (f" ({source.skip})" if source.skip else ""),
            jobs=jobs,
            compared=0,
        )


def check_peak(source: Source, rows: list[JobAccounting], limit: int, checks: Checks) -> None:
    peak = job_states.peak_concurrency(rows)
    name = f"{source.prefix}.peak_concurrency"
    if peak.unreadable:
        checks.fail(
            name,
            ACCOUNTING,
            f"{len(peak.unreadable)} of {len(rows)} jobs have times in {source.name} that do not parse, so the jobs running at once "
            "cannot be counted: " + "; ".join(peak.unreadable[:5]) + ("; ..." if len(peak.unreadable) > 5 else ""),
            unreadable=list(peak.unreadable),
            limit=limit,
        )
        return
    if not peak.counted:
        checks.fail(
            name,
            ACCOUNTING,
            f"none of the campaign's {len(rows)} jobs has a start time in {source.name}: the jobs running at once were counted over nothing",
            jobs=len(rows),
            limit=limit,
        )
        return
    message = (
        f"peak {peak.jobs} {source.jobs} running at once"
        + (f" at {peak.at.isoformat()} ({', '.join(peak.job_ids)})" if peak.at else "")
        + f"; the campaign's limit is {limit}"
    )
    if peak.counted < len(rows):
        message += f" ({peak.counted} of the {len(rows)} jobs started)"
    checks.expect(
        name,
        peak.jobs <= limit,
        ACCOUNTING,
        message,
        peak=peak.jobs,
        limit=limit,
        at=peak.at.isoformat() if peak.at else None,
        job_ids=peak.job_ids,
        counted=peak.counted,
    )
