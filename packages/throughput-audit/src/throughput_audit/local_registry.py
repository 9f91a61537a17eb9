"""Local campaigns against the local scheduler's registry (`<campaign>/.local-jobs/`),
which is to them what sacct is to a Slurm campaign: every receipt's job is there, with
the checks of `jobs`; each job got what the profile asked of the local scheduler; no
job ran without a receipt; at most the profile's number of jobs ran at once.
accounting.txt's text."""

from __future__ import annotations

import time
from datetime import datetime

from throughput_audit import clock_skew, slurm
from throughput_audit.allocation import mem_mib
from throughput_audit.campaign import AttemptRecord, Loaded
from throughput_audit.findings import Checks
from throughput_audit.job_states import job_order
from throughput_audit.jobs import Source, check_job, check_peak, check_worker_times_ran
from throughput_schema import ClusterProfile, Receipt, SchemaError
from throughput_schema.layout import INTENT, RECEIPT
from throughput_schema.local_jobs import (
    LOCAL_JOBS_DIR,
    LocalEnd,
    LocalJob,
    RegisteredJob,
    job_accounting,
    read_registry,
)
from throughput_slurm.sacct import AccountingRow, slurm_duration

REGISTRY = Source("local", "the local job registry", jobs="local jobs")


def check_local(loaded: Loaded, checks: Checks) -> str:
    profile = loaded.manifest.profile
    receipts = _receipts_by_job(loaded, checks)
    try:
        registry = read_registry(loaded.root / LOCAL_JOBS_DIR)
    except SchemaError as exc:
        checks.fail("local.registry", LOCAL_JOBS_DIR, f"{LOCAL_JOBS_DIR}: the local job registry is unreadable: {exc}")
        return f"# local job registry unreadable: {exc}\n"
    if receipts and not registry:
        checks.fail(
            "local.registry",
            LOCAL_JOBS_DIR,
            f"{LOCAL_JOBS_DIR}: no local job registry, yet {len(receipts)} receipts name local jobs",
        )
        return "# no local job registry\n"
    jobs = {job_id: job_accounting(entry.job, entry.end) for job_id, entry in registry.items()}
    skews = clock_skew.measure(REGISTRY, [(r, jobs[j]) for j, r in receipts.items() if j in jobs], checks)
    compared = 0
    for job_id, r in sorted(receipts.items(), key=lambda kv: job_order(kv[0])):
        if _check_registered(r, job_id, registry, profile, checks):
            skew = skews.get(clock_skew.node_of(r, jobs[job_id]), 0.0)
            names = {"token": registry[job_id].job.token}
            compared += check_job(REGISTRY, r, jobs[job_id], checks, names=names, skew=skew)
    check_worker_times_ran(REGISTRY, len(receipts), compared, checks)
    _check_unreceipted(loaded, registry, receipts, checks)
    check_peak(REGISTRY, list(jobs.values()), profile.max_concurrent_jobs, checks)
    rows = [accounting_row(entry.job, entry.end, account=profile.account) for entry in registry.values()]
    return (
        f"# {loaded.manifest.name}: local job registry {LOCAL_JOBS_DIR}/, {len(registry)} jobs\n"
        + slurm.format_rows(rows)
    )


def _receipts_by_job(loaded: Loaded, checks: Checks) -> dict[str, AttemptRecord]:
    """Each job's attempt, by the job id its receipt names; a job named twice is a finding."""
    receipts: dict[str, AttemptRecord] = {}
    for r in loaded.attempts:
        rec = r.attempt.receipt
        if rec is None:
            continue
        if rec.job_id in receipts:
            file = r.file(RECEIPT)
            checks.fail(
                "local.duplicate_job",
                file,
                f"{file}: job {rec.job_id} is also the receipt of {receipts[rec.job_id].file(RECEIPT)}",
                job_id=rec.job_id,
            )
            continue
        receipts[rec.job_id] = r
    return receipts


def _check_registered(
    r: AttemptRecord, job_id: str, registry: dict[str, RegisteredJob], profile: ClusterProfile, checks: Checks
) -> bool:
    """Whether a receipt's job is a local job in the registry (its allocation checked); the
    job's own checks run only where it is."""
    file = r.file(RECEIPT)
    if _receipt(r).scheduler != profile.scheduler:
        checks.fail(
            "local.receipt",
            file,
            f"{file}: scheduler {_receipt(r).scheduler} in a campaign whose profile names {profile.scheduler}",
        )
        return False
    entry = registry.get(job_id)
    if entry is None:
        checks.fail(
            "local.accounted",
            file,
            f"{file}: job {job_id} is not in the local job registry ({LOCAL_JOBS_DIR})",
            job_id=job_id,
        )
        return False
    checks.expect("local.accounted", True, file, f"{file}: job {job_id} found in the local job registry", job_id=job_id)
    check_allocation(entry.job, profile, file, checks)
    return True


def _check_unreceipted(
    loaded: Loaded, registry: dict[str, RegisteredJob], receipts: dict[str, AttemptRecord], checks: Checks
) -> None:
    """No job ran without a receipt in the campaign."""
    unreceipted = [job_id for job_id in registry if job_id not in receipts]
    for job_id in unreceipted:
        token = registry[job_id].job.token
        owner = next(
            (x.file(INTENT) for x in loaded.attempts if x.attempt.intent and x.attempt.intent.token == token), None
        )
        checks.fail(
            "local.unreceipted",
            f"{LOCAL_JOBS_DIR}/{job_id}.json",
            f"{LOCAL_JOBS_DIR}/{job_id}.json: job {job_id} ({token}) ran without a receipt in the campaign"
            + (f"; its token is that of {owner}" if owner else "; no attempt has its token"),
            job_id=job_id,
            token=token,
        )
    if not unreceipted:
        checks.expect(
            "local.unreceipted",
            True,
            LOCAL_JOBS_DIR,
            f"{LOCAL_JOBS_DIR}: each of its {len(registry)} jobs has a receipt",
        )


def check_allocation(job: LocalJob, profile: ClusterProfile, file: str, checks: Checks) -> None:
    """What the job asked of the local scheduler is the profile's request; what it really
    had is stated: its GPUs and time limit are enforced, its CPUs and memory are not."""
    problems = []
    if job.cpus != profile.cpus_per_task:
        problems.append(f"requested cpus {job.cpus}, profile requires {profile.cpus_per_task}")
    want, got = mem_mib(profile.mem), mem_mib(job.mem)
    if want != got:
        problems.append(f"requested mem {job.mem!r}, profile requires {profile.mem!r}")
    if abs(job.time_limit_seconds - profile.time_limit_minutes * 60) > 1e-6:
        problems.append(f"time limit {job.time_limit_seconds:g} s, profile requires {profile.time_limit_minutes} min")
    gpus = len(job.gpus.split(",")) if job.gpus else 0
    if gpus not in (0, profile.gpus_per_job):
        problems.append(f"{gpus} GPUs ({job.gpus}), profile requires {profile.gpus_per_job}")
    if job.machine_cpus:
        had = f"shared the machine's {job.machine_cpus} CPUs" + (
            f" and {job.machine_mem} memory" if job.machine_mem else ""
        )
    else:  # a registry `throughput-schema upgrade` rewrote: older tools did not record them
        had = "ran on a machine whose CPUs and memory its registry, rewritten by the upgrade, does not record"
    checks.expect(
        "local.allocation",
        not problems,
        file,
        f"{file}: job {job.job_id} "
        + (
            "; ".join(problems)
            if problems
            else f"{'GPU ' + job.gpus if job.gpus else 'no GPU'}, time limit {job.time_limit_seconds:g} s; "
            f"requested {job.cpus} CPUs and {job.mem or 'no memory limit'}, not enforced by the local scheduler: it {had}"
        ),
        job_id=job.job_id,
        gpus=job.gpus,
        requested_cpus=job.cpus,
        requested_mem=job.mem,
        machine_cpus=job.machine_cpus,
        machine_mem=job.machine_mem,
    )


def _receipt(r: AttemptRecord) -> Receipt:
    """The receipt of an attempt in `receipts`, which holds only attempts with one."""
    assert r.attempt.receipt is not None, f"{r.rel}: listed by its receipt, yet without one"
    return r.attempt.receipt


def accounting_row(job: LocalJob, end: LocalEnd | None, *, account: str, now: float | None = None) -> AccountingRow:
    """The job as sacct would print it, for accounting.txt."""
    base = dict(
        job_id=job.job_id,
        job_name=job.token,
        partition="local",
        account=account,
        timelimit=slurm_duration(job.time_limit_seconds),
        alloc_tres=_tres(job),
        req_mem=job.mem,
        comment=job.token,
        node_list=job.host,
    )
    if end is None:
        started = datetime.fromisoformat(job.submitted_at).timestamp()
        running = (time.time() if now is None else now) - started
        return AccountingRow(
            **base,
            state="RUNNING",
            exit_code="0:0",
            start=job.submitted_at,
            end="Unknown",
            elapsed=slurm_duration(running),
        )
    return AccountingRow(
        **base,
        state=end.state,
        exit_code=end.exit_code,
        start=end.start,
        end=end.end,
        elapsed=slurm_duration(end.elapsed_seconds),
    )


def _tres(job: LocalJob) -> str:
    if job.machine_cpus:
        tres = f"cpu={job.machine_cpus}" + (f",mem={job.machine_mem}" if job.machine_mem else "")
    else:
        tres = f"cpu={job.cpus}" + (f",mem={job.mem}" if job.mem else "")
    if job.gpus:
        tres += f",gres/gpu={len(job.gpus.split(','))}"
    return tres
