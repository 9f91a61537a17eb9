"""The local scheduler's job registry: its records, the one reader of it, and each job's
accounting in the project's words (`job_accounting`), as a receipt stores it.

    <campaign>/.local-jobs/      LOCAL_JOBS_DIR
      <id>.json      the job (`LocalJob`): token, script, workdir, slot, GPUs, time limit,
                     what the profile requested and what the machine really gave, and the
                     wrapper's pid with its /proc start time (defeats pid reuse); written
                     by `LocalScheduler.submit` right after spawning the wrapper.
      <id>.end.json  how it ended (`LocalEnd`): state, exit code "rc:signal", start, end;
                     written by the wrapper (`local_job`), or by `poll` as NODE_FAIL when
                     the wrapper vanished without one, e.g. after a reboot or a SIGKILL of
                     the wrapper.
      <id>.log       the wrapper's own messages.

The registry is to a local campaign what sacct is to a Slurm one: the scheduler copies
`job_accounting` into receipts, and the audit rebuilds the same record here to check them
(its accounting.txt prints each job as sacct would, `throughput_audit.local_registry`).
Its end states are written in Slurm's words (`ENDED_AS` reads them).
It lives in the schema because the scheduler, the wrapper on the node and the audit all
read it. All files are written atomically.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import msgspec

from throughput_schema.codec import decode, read
from throughput_schema.job_accounting import JobAccounting, JobAllocation, JobState, exit_status, memory_bytes

__all__ = [
    "ENDED_AS",
    "LOCAL_JOBS_DIR",
    "LocalEnd",
    "LocalJob",
    "RegisteredJob",
    "job_accounting",
    "end_path",
    "job_log",
    "job_path",
    "read_registry",
    "stamp",
]

LOCAL_JOBS_DIR = ".local-jobs"
T = TypeVar("T")

# The registry's end states (written by the wrapper, `local_job`) in the project's words.
ENDED_AS: dict[str, JobState] = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "TIMEOUT": "timeout",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "node_fail",
}


class LocalJob(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    token: str
    script: str
    workdir: str
    output: str
    slot: int
    gpus: str = ""  # CUDA_VISIBLE_DEVICES of the job; "" = no GPU (environment untouched)
    submitted_at: str
    time_limit_seconds: float
    kill_wait_seconds: float = 10.0
    wrapper_pid: int
    wrapper_start: int  # /proc/<pid>/stat field 22; 0 where /proc is unavailable
    # What the profile requested (Slurm's ReqCPUS/ReqMem).
    cpus: int = 0
    mem: str = ""
    # What the job really had. The local scheduler limits only the GPUs it hands out and
    # the time; CPUs and memory are the machine's, shared with everything else on it, so
    # those are recorded here, not the profile's request.
    # 0 and "" only in a registry `throughput-schema upgrade` rewrote: older tools did not
    # record them (`upgrade_registry`).
    machine_cpus: int = 0
    machine_mem: str = ""
    host: str  # required: a registry without it is refused with the upgrade that fills it


class LocalEnd(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    state: str
    exit_code: str  # "rc:signal", as sacct prints it
    start: str
    end: str
    elapsed_seconds: float
    message: str = ""


def job_path(jobs_dir: Path, job_id: str) -> Path:
    return jobs_dir / f"{job_id}.json"


def end_path(jobs_dir: Path, job_id: str) -> Path:
    return jobs_dir / f"{job_id}.end.json"


def job_log(job_id: str) -> str:
    """A local job's output file in its attempt folder (`LocalJob.output`)."""
    return f"local-{job_id}.out"


def stamp(when: float | None = None) -> str:
    """Local time like sacct's, but with its UTC offset: the registry travels with the
    campaign, and an audit in another timezone must read the same instant."""
    return datetime.fromtimestamp(time.time() if when is None else when).astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class RegisteredJob:
    job: LocalJob
    end: LocalEnd | None  # None while the job runs, or when its wrapper vanished unsettled


def read_registry(jobs_dir: Path, rewritten: Mapping[Path, bytes] | None = None) -> dict[str, RegisteredJob]:
    """Every job of the registry by id, in id order; {} when there is no registry.
    A malformed record raises SchemaError naming its file. `rewritten`: files read from
    these bytes instead of the disk (the registry as `upgrade` will leave it)."""
    if not jobs_dir.is_dir():
        return {}
    given = rewritten or {}

    def record(path: Path, type_: type[T]) -> T:
        return decode(given[path], type_, source=str(path)) if path in given else read(path, type_)

    found = {}
    for path in jobs_dir.glob("*.json"):
        stem = path.name[: -len(".json")]
        if stem.isdigit():
            end = end_path(jobs_dir, stem)
            found[stem] = RegisteredJob(record(path, LocalJob), record(end, LocalEnd) if end.exists() else None)
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def job_accounting(job: LocalJob, end: LocalEnd | None, *, now: float | None = None) -> JobAccounting:
    """The job's accounting, its registry records kept as `raw`."""
    allocation = JobAllocation(
        nodes=job.host,
        gpus=len(job.gpus.split(",")) if job.gpus else None,
        cpus=job.machine_cpus or job.cpus or None,
        memory_bytes=memory_bytes(job.machine_mem or job.mem) if job.machine_mem or job.mem else None,
    )
    raw = msgspec.json.encode({"job": job, "end": end}).decode()
    if end is None:
        started = datetime.fromisoformat(job.submitted_at).timestamp()
        return JobAccounting(
            job_id=job.job_id,
            state="running",
            start=job.submitted_at,
            elapsed_seconds=(time.time() if now is None else now) - started,
            time_limit_seconds=job.time_limit_seconds,
            allocation=allocation,
            raw=raw,
        )
    exit_code, signal = exit_status(end.exit_code)
    return JobAccounting(
        job_id=job.job_id,
        state=ENDED_AS.get(end.state, "failed"),
        start=end.start,
        end=end.end,
        elapsed_seconds=end.elapsed_seconds,
        time_limit_seconds=job.time_limit_seconds,
        exit_code=exit_code,
        signal=signal,
        allocation=allocation,
        raw=raw,
    )
