"""The embedded scheduler: jobs as detached processes on this machine, no Slurm needed.

Slots: one per group of `profile.gpus_per_job` visible GPUs (CUDA_VISIBLE_DEVICES if it
is set, else `nvidia-smi -L`), each job getting its own CUDA_VISIBLE_DEVICES; without a
GPU there is one slot and the environment is left as it is; never more slots than the
profile's `max_concurrent_jobs`. `submit` starts the job at once when a slot is free and
otherwise waits (cancellable) until one frees: there is no pending queue to lose.

Each job runs the same batch script as on Slurm (`bash job.sh` in `workdir`, output to
`workdir/local-<id>.out`) under a tiny wrapper, `python -m throughput_sweep.node.local_job
run-job JOBS_DIR ID` (`local_job`),
started in its own session, so Ctrl-C of the watcher or its death leaves jobs running.
Job ids are 1, 2, 3... per registry. The registry (`throughput_schema.local_jobs`) survives the
watcher: `submit` records each job, the wrapper records how it ended.

`poll` reads the registry straight into the interface's words: running, completed (exit
0), failed (non-zero exit, or a signal), timeout (the profile's time limit), cancelled
(`cancel`), node_fail (wrapper gone, no end record), with the times in seconds as the
registry holds them; the wrapper's docstring says how a job is stopped. The registry
writes its end states in Slurm's words (`local_jobs.ENDED_AS` reads them). The accounting
a receipt keeps (`throughput_schema.local_jobs.job_accounting`, which the audit rebuilds)
carries the state, exit code, start, end, elapsed seconds, the time limit, the host name,
and as the allocation the job's GPUs with the CPUs and memory it really had: the
machine's, since nothing here limits them.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import anyio.to_thread

from throughput_schema import ClusterProfile, SchemaError, read, write_atomic, write_new
from throughput_schema.argparsing import storage_error
from throughput_schema.configs import SchedulerName
from throughput_schema.local_jobs import (
    LOCAL_JOBS_DIR,
    LocalEnd,
    LocalJob,
    end_path,
    job_accounting,
    job_path,
    read_registry,
    stamp,
)
from throughput_schema.local_jobs import job_log as local_job_log
from throughput_schema.node_local import kept_path
from throughput_sweep.node import local_job
from throughput_sweep.node.host import _alive, detect_gpus, machine_cpus, machine_mem, proc_start_time
from throughput_sweep.schedulers.base import Findings, JobStatus, Pending, QueryFailed, Scheduler, SubmitFailed

if TYPE_CHECKING:
    from throughput_sweep.campaign import Campaign
    from throughput_sweep.curves import Curve

__all__ = ["LocalScheduler"]


class LocalScheduler:
    """The `Scheduler` interface on this machine, and its `Backend` (see the module docstring)."""

    name: ClassVar[SchedulerName] = "local"
    accounting_source: ClassVar[str] = "the local job registry"
    poll_max_seconds: ClassVar[float] = 5.0  # a poll reads files: polling often costs nothing
    remote_nodes: ClassVar[bool] = False
    title: ClassVar[str] = "the local scheduler"
    budget_check: ClassVar[str] = ""  # no allocation budget here
    cancel_command: ClassVar[str] = ""  # a job is cancelled through the registry, by the watcher

    @staticmethod
    def detect() -> str:
        return ""  # the default, wherever no other scheduler is found

    @staticmethod
    def submit_args_problem(args: list[str]) -> str:
        return f"extra_submit_args {' '.join(args)}: the local scheduler takes none; remove them" if args else ""

    @staticmethod
    def job_log(job_id: str) -> str:
        return local_job_log(job_id)

    @classmethod
    def preflight(cls, campaign: Campaign, curves: list[Curve], *, dry_run: bool) -> Findings | str:
        return f"does not apply to {cls.title} (its jobs start here, when a slot is free)"

    @staticmethod
    def early_end(log: Path, reason: str) -> str:
        return ""  # it ends a job only at its time limit

    @staticmethod
    def refusal_fields(message: str) -> str:
        return ""  # it refuses no job

    @classmethod
    def for_status(cls, profile: ClusterProfile, campaign: Path) -> Scheduler:
        return cls.for_campaign(profile, campaign, gpus=[])  # no GPU detection: status hands out no slots

    @staticmethod
    def environment_removed() -> dict[str, str]:
        return {}  # a job gets this shell's environment, its GPUs set

    def removed_environment(self) -> dict[str, str]:
        return {}

    @staticmethod
    def read_pending(reason: str) -> Pending:
        return Pending(reason)  # a local job never pends: `submit` waits for a slot

    @staticmethod
    def submit_command(profile: ClusterProfile, script: Path, *, token: str, workdir: Path) -> list[str] | None:
        return None  # `submit` starts the job's wrapper itself

    def __init__(
        self,
        profile: ClusterProfile,
        jobs_dir: str | Path,
        *,
        gpus: list[str] | None = None,
        time_limit_seconds: float | None = None,
        kill_wait_seconds: float = 10.0,
        python: str = sys.executable,
        wait_interval: float = 0.5,
    ) -> None:
        self.profile = profile
        self.jobs_dir = Path(jobs_dir).absolute()
        gpus = detect_gpus() if gpus is None else list(gpus)
        per = max(1, profile.gpus_per_job)
        groups = [gpus[i : i + per] for i in range(0, len(gpus) - per + 1, per)]
        # The profile's job limit holds here as on Slurm, even on a machine with more GPUs.
        self.slot_gpus: list[str] = ([",".join(g) for g in groups] or [""])[: profile.max_concurrent_jobs]
        self.slots = len(self.slot_gpus)
        self.time_limit_seconds = (
            float(profile.time_limit_minutes * 60) if time_limit_seconds is None else float(time_limit_seconds)
        )
        self.kill_wait_seconds = kill_wait_seconds
        self.python = python
        self.wait_interval = wait_interval
        self._children: dict[str, subprocess.Popen] = {}
        self._lock = anyio.Lock()
        # What every job really gets besides its GPUs: the whole machine, unlimited.
        self.machine_cpus = machine_cpus()
        self.machine_mem = machine_mem()
        self.host = socket.gethostname()

    @classmethod
    def for_campaign(cls, profile: ClusterProfile, campaign: str | Path, **kwargs: Any) -> Scheduler:
        return cls(profile, Path(campaign) / LOCAL_JOBS_DIR, **kwargs)

    # ------------------------------------------------------------------ registry

    def _job_path(self, job_id: str) -> Path:
        return job_path(self.jobs_dir, job_id)

    def _end_path(self, job_id: str) -> Path:
        return end_path(self.jobs_dir, job_id)

    def _cancel_path(self, job_id: str) -> Path:
        """Written by `cancel` before its SIGTERM: a wrapper gone without an end is then CANCELLED."""
        return self.jobs_dir / f"{job_id}.cancelled"

    def _load(self, job_id: str) -> LocalJob | None:
        path = self._job_path(job_id)
        if not path.exists():
            return None
        return read(path, LocalJob)

    def _load_end(self, job_id: str) -> LocalEnd | None:
        path = self._end_path(job_id)
        if not path.exists():
            return None
        return read(path, LocalEnd)

    def _all_jobs(self) -> list[LocalJob]:
        return [r.job for r in read_registry(self.jobs_dir).values()]

    def _reap(self) -> None:
        for job_id, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[job_id]

    def _running(self, job: LocalJob) -> bool:
        """The job's wrapper is alive and has not recorded an end."""
        if self._end_path(job.job_id).exists():
            return False
        return _alive(job.wrapper_pid, job.wrapper_start)

    def _settle(self, job: LocalJob) -> LocalEnd | None:
        """The end record, writing NODE_FAIL if the wrapper vanished without one."""
        end = self._load_end(job.job_id)
        if end is not None:
            return end
        if _alive(job.wrapper_pid, job.wrapper_start):
            return None
        end = self._load_end(job.job_id)  # written just before the wrapper exited?
        if end is not None:
            return end
        kept = kept_path(self._end_path(job.job_id))
        if kept.exists():
            # The wrapper's end, kept on this machine while the registry's disk was full:
            # published now (a full disk still stops the watcher, one line), then dropped.
            end = read(kept, LocalEnd)
            if not write_new(self._end_path(job.job_id), end):
                end = self._load_end(job.job_id)
            kept.unlink(missing_ok=True)
            return end
        if self._cancel_path(job.job_id).exists():
            # cancel's SIGTERM reached the wrapper before it had set its handlers (a loaded
            # machine starting Python), so it never started the job's script.
            state, message = "CANCELLED", "cancelled before the job's wrapper had started its script"
        else:
            state = "NODE_FAIL"
            message = "the job's wrapper process is gone without an end record (machine restarted or wrapper killed)"
        end = LocalEnd(
            job_id=job.job_id,
            state=state,
            exit_code="0:0",
            start=job.submitted_at,
            end=stamp(),
            elapsed_seconds=0.0,
            message=message,
        )
        if not write_new(self._end_path(job.job_id), end):
            return self._load_end(job.job_id)  # the wrapper's own end came after all
        return end

    # -------------------------------------------------------------------- submit

    def _try_start(self, script: Path, token: str, workdir: Path) -> str | None:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.jobs_dir / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._reap()
            jobs = self._all_jobs()
            busy = {j.slot for j in jobs if self._running(j)}
            free = [s for s in range(self.slots) if s not in busy]
            if not free:
                return None
            slot = free[0]
            job_id = str(max((int(j.job_id) for j in jobs), default=0) + 1)
            env = dict(os.environ)
            if self.slot_gpus[slot]:
                env["CUDA_VISIBLE_DEVICES"] = self.slot_gpus[slot]
            env["THROUGHPUT_LOCAL_JOB_ID"] = job_id
            with open(self.jobs_dir / f"{job_id}.log", "ab") as log:
                try:
                    proc = subprocess.Popen(
                        [self.python, "-m", local_job.__name__, "run-job", str(self.jobs_dir), job_id],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        close_fds=True,
                    )
                except OSError as exc:
                    raise SubmitFailed(f"cannot start the local job wrapper: {exc}", permanent=True) from None
            record = LocalJob(
                job_id=job_id,
                token=token,
                script=str(Path(script).absolute()),
                workdir=str(Path(workdir).absolute()),
                output=str(Path(workdir).absolute() / self.job_log(job_id)),
                slot=slot,
                gpus=self.slot_gpus[slot],
                submitted_at=stamp(),
                time_limit_seconds=self.time_limit_seconds,
                kill_wait_seconds=self.kill_wait_seconds,
                wrapper_pid=proc.pid,
                wrapper_start=proc_start_time(proc.pid) or 0,
                cpus=self.profile.cpus_per_task,
                mem=self.profile.mem,
                machine_cpus=self.machine_cpus,
                machine_mem=self.machine_mem,
                host=self.host,
            )
            write_atomic(self._job_path(job_id), record)
            self._children[job_id] = proc
            return job_id

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        if not Path(script).is_file():
            raise SubmitFailed(f"batch script not found: {script}", permanent=True)
        if not Path(workdir).is_dir():
            raise SubmitFailed(f"working folder not found: {workdir}", permanent=True)
        async with self._lock:
            while True:
                try:
                    job_id = await anyio.to_thread.run_sync(self._try_start, Path(script), token, Path(workdir))
                except SchemaError as exc:
                    raise SubmitFailed(f"local job registry unreadable: {exc}", permanent=True) from None
                except OSError as exc:
                    if storage_error(exc):
                        raise  # a full disk stops the watcher, not a retry (docs/reliability.md)
                    raise SubmitFailed(f"local job registry: {exc}", permanent=False) from None
                if job_id is not None:
                    return job_id
                await anyio.sleep(self.wait_interval)

    # ---------------------------------------------------------------------- poll

    def _status(self, job_id: str) -> JobStatus:
        job = self._load(job_id)
        if job is None:
            return JobStatus(job_id, "unknown", note="not in the local job registry")
        end = self._settle(job)
        accounting = job_accounting(job, end)
        if end is None:
            return JobStatus(job_id, "running", said="RUNNING", accounting=accounting)
        return JobStatus(
            job_id, accounting.state, said=end.state, accounting=accounting, accounting_final=True, note=end.message
        )

    async def ended_reason(self, job_id: str) -> str:
        return ""  # the end record's message is the status's note

    async def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        def work() -> dict[str, JobStatus]:
            self._reap()
            return {str(j): self._status(str(j)) for j in dict.fromkeys(job_ids)}

        try:
            return await anyio.to_thread.run_sync(work)
        except (SchemaError, OSError) as exc:
            raise _query_failed(exc) from None

    async def find_by_token(self, tokens: list[str], since: datetime) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {t: [] for t in tokens}
        try:
            jobs = await anyio.to_thread.run_sync(self._all_jobs)
        except (SchemaError, OSError) as exc:
            raise _query_failed(exc) from None
        for job in jobs:
            if job.token in found:
                found[job.token].append(job.job_id)
        return found

    async def launch_failure(self, job_id: str) -> str:
        return ""  # the wrapper opens the output file itself before it runs the script

    async def cancel(self, job_id: str) -> None:
        try:
            job = self._load(str(job_id))
        except SchemaError as exc:
            raise QueryFailed(str(exc)) from None
        if job is None or not self._running(job):
            return
        self._cancel_path(job.job_id).touch()
        try:
            os.kill(job.wrapper_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def running_jobs(self) -> list[str]:
        """Ids of jobs whose wrapper is alive (for diagnostics and tests)."""
        return [j.job_id for j in self._all_jobs() if self._running(j)]


def _query_failed(exc: Exception) -> Exception:
    """A registry the poll cannot read or settle is retried; a full disk under it is not
    (the watcher stops in one line and `--resume` goes on once there is space)."""
    if isinstance(exc, OSError) and storage_error(exc):
        return exc
    return QueryFailed(f"local job registry unreadable: {exc}")
