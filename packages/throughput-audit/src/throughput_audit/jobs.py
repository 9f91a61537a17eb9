"""The checks every job gets against its scheduler's own record of it: sacct's row on
Slurm, the registry's row (`throughput_schema.local_jobs.accounting_row`) on the local
scheduler. Check names start with the scheduler's name ("slurm.", "local.").

- identity: the job carries the attempt's token as its name or comment;
- state: its end state and exit code agree with the result's outcome;
- worker_times: every timestamp a worker wrote lies within the job's start and end;
- receipt_accounting: every figure of the receipt's accounting copy, which collect
  publishes, equals the scheduler's record now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from throughput_schema import AccountingRow, WorkerResult
from throughput_schema.layout import ACCOUNTING, BASELINE, RECEIPT, RESULT

from throughput_audit import slurm
from throughput_audit.campaign import AttemptRecord, kind
from throughput_audit.findings import Checks

# Both clocks print whole seconds: a worker's time may read up to a second off the job's.
GRANULARITY = timedelta(seconds=1)
# A receipt's accounting recorded before the job's end (published as not final) may hold
# a row sacct had not filled in yet (JobName "allocation", no partition): only its job id
# must agree.
_NOT_FINAL = ("job_id",)


def check_job(prefix: str, r: AttemptRecord, row: AccountingRow, checks: Checks, *, times: AccountingRow | None = None) -> None:
    """`times`: the row with start and end as instants, where the record's own strings
    are ambiguous (older local registries wrote local time without an offset)."""
    file = r.file(RECEIPT)
    job_id = row.job_id
    token = r.attempt.intent.token if r.attempt.intent else r.attempt.receipt.token
    checks.expect(
        f"{prefix}.identity",
        token == row.comment or token in row.job_name,
        file,
        f"{file}: job {job_id} is named {row.job_name!r} with comment {row.comment!r}; the intent's token is {token!r}",
        job_id=job_id,
        job_name=row.job_name,
        comment=row.comment,
        token=token,
    )
    res = r.attempt.result
    if res is not None:
        k = kind(res)
        checks.expect(
            f"{prefix}.state",
            slurm.state_explains(k, row, res.finished_at),
            file,
            f"{file}: job {job_id} ended {row.state} exit {row.exit_code}; result.json outcome {k} "
            f"implies {slurm.expected_states(k)}",
            job_id=job_id,
            state=row.state,
            exit_code=row.exit_code,
            outcome=k,
        )
    check_worker_times(prefix, r, times or row, checks)
    check_receipt_copy(prefix, r, row, checks)


def check_receipt_copy(prefix: str, r: AttemptRecord, row: AccountingRow, checks: Checks) -> None:
    receipt = r.attempt.receipt
    recorded = receipt.accounting
    if recorded is None:
        return
    file = r.file(RECEIPT)
    fields = AccountingRow.__struct_fields__ if receipt.accounting_final else _NOT_FINAL
    differ = [f for f in fields if getattr(recorded, f) != getattr(row, f)]
    source = "sacct" if prefix == "slurm" else "the local job registry"
    checks.expect(
        f"{prefix}.receipt_accounting",
        not differ,
        file,
        f"{file}: the receipt's accounting of job {row.job_id} "
        + (
            "; ".join(f"{f} {getattr(recorded, f)!r}, {source} says {getattr(row, f)!r}" for f in differ)
            if differ
            else f"equals {source} ({'final' if receipt.accounting_final else 'recorded while running'}: "
            f"{row.state} exit {row.exit_code}, elapsed {row.elapsed})"
        ),
        job_id=row.job_id,
        differ={f: {"receipt": getattr(recorded, f), "scheduler": getattr(row, f)} for f in differ},
    )


def _worker_results(r: AttemptRecord) -> list[tuple[str, WorkerResult]]:
    """Results written inside the job. One the controller wrote from the final accounting
    for a job that left none (phase "slurm", whatever the scheduler) is dated after it."""
    found = [(r.file(RESULT), r.attempt.result), (r.file(BASELINE), r.attempt.baseline)]
    return [(file, res) for file, res in found if res is not None and res.outcome.phase != "slurm"]


def check_worker_times(prefix: str, r: AttemptRecord, row: AccountingRow, checks: Checks) -> None:
    start, end = slurm.parse_time(row.start), slurm.parse_time(row.end)
    if start is None or end is None:
        return  # not started or not ended: the state check says so
    elapsed = slurm.timelimit_minutes(row.elapsed)
    for file, res in _worker_results(r):
        stamps = {"started_at": res.started_at, "finished_at": res.finished_at}
        problems = []
        when: dict[str, datetime] = {}
        for what, text in stamps.items():
            at = slurm.parse_time(text) if text else None
            if at is None:
                problems.append(f"{what} {text!r} is not a time (a worker always records when it ran)")
            elif not start - GRANULARITY <= at <= end + GRANULARITY:
                problems.append(f"{what} {text} lies outside the job's {row.start} .. {row.end}")
            else:
                when[what] = at
        if len(when) == 2 and elapsed is not None and slurm._head(row.state) not in slurm.LOST_AFTER_RESULT:
            ran = (when["finished_at"] - when["started_at"]).total_seconds()
            if ran > elapsed * 60 + GRANULARITY.total_seconds():
                problems.append(f"the worker ran {ran:.0f} s, longer than the job's elapsed {row.elapsed}")
        checks.expect(
            f"{prefix}.worker_times",
            not problems,
            file,
            f"{file}: " + ("; ".join(problems) if problems else f"worker ran {res.started_at} .. {res.finished_at}")
            + f" (job {row.job_id}: {row.start} .. {row.end}, elapsed {row.elapsed})",
            job_id=row.job_id,
            started_at=res.started_at,
            finished_at=res.finished_at,
            job_start=row.start,
            job_end=row.end,
        )


def check_peak(prefix: str, rows: list[AccountingRow], limit: int, checks: Checks) -> None:
    peak = slurm.peak_concurrency(rows)
    checks.expect(
        f"{prefix}.peak_concurrency",
        peak.jobs <= limit,
        ACCOUNTING,
        f"peak {peak.jobs} {'local ' if prefix == 'local' else ''}jobs running at once"
        + (f" at {peak.at.isoformat()} ({', '.join(peak.job_ids)})" if peak.at else "")
        + f"; the campaign's limit is {limit}",
        peak=peak.jobs,
        limit=limit,
        at=peak.at.isoformat() if peak.at else None,
        job_ids=peak.job_ids,
    )
