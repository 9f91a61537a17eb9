"""The wrapper around one local job: `python -m throughput_sweep.node.local_job run-job JOBS_DIR ID`.

`LocalScheduler.submit` starts it in its own session, once per job. It runs `bash script`
in the job's workdir, enforces the time limit and records how the job ended in
`<id>.end.json` (see `throughput_schema.local_jobs`).

Exactly once: the wrapper only runs the script after it has found `<id>.json` naming its
own pid (a handshake, 30 s at most). A watcher killed between spawning and recording
leaves a wrapper that gives up and runs nothing, so "no record" really means "never ran".

Ending early: at the time limit (TIMEOUT) or on SIGTERM, SIGINT or SIGHUP to the wrapper
(CANCELLED; `cancel` sends SIGTERM) the wrapper SIGTERMs the job's whole session, then
SIGKILLs it after `kill_wait_seconds`. Without cgroups, "the whole job" is the job's session (the
watchdog keeps workers in it, in their own process groups); a process that calls
setsid() itself escapes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from throughput_schema import EXIT_CODES, SchemaError, read, write_atomic
from throughput_schema.local_jobs import LocalEnd, LocalJob, end_path, job_path, stamp
from throughput_schema.node_local import not_written

__all__ = ["main", "run_job"]

HANDSHAKE_SECONDS = 30.0


def _session_members(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def _signal_session(sid: int, sig: int) -> None:
    """Signal every process of the job's session (the watchdog puts workers in own groups)."""
    targets = set(_session_members(sid)) if Path("/proc").is_dir() else set()
    try:
        os.killpg(sid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in targets:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _await_handshake(jobs_dir: Path, job_id: str) -> LocalJob | None:
    """The job's record once it names this wrapper; None (said on stdout) where the job must not run."""
    record_path = job_path(jobs_dir, job_id)
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    while time.monotonic() < deadline:
        if record_path.exists():
            try:
                candidate = read(record_path, LocalJob)
            except SchemaError:
                candidate = None
            if candidate is not None:
                if candidate.wrapper_pid != os.getpid():
                    print(f"job {job_id}: the registry names another process; not running", flush=True)
                    return None
                return candidate
        time.sleep(0.05)
    print(f"job {job_id}: never recorded by the submitter; not running", flush=True)
    return None


def _supervise(child: subprocess.Popen, job: LocalJob, limit: float, stop: list[int]) -> str | None:
    """Wait for the job; at its time limit or on a stop signal end its session: why it was ended, if it was."""
    reason = None
    while True:
        try:
            child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if stop:
            reason = "CANCELLED"
        elif time.time() >= limit:
            reason = "TIMEOUT"
        if reason:
            _signal_session(child.pid, signal.SIGTERM)
            try:
                child.wait(timeout=job.kill_wait_seconds)
            except subprocess.TimeoutExpired:
                _signal_session(child.pid, signal.SIGKILL)
                child.wait()
            break
    return reason


def run_job(jobs_dir: Path, job_id: str) -> int:
    """The wrapper: handshake, run `bash script`, enforce the time limit, record the end."""
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _f: stop.append(signum))
    job = _await_handshake(jobs_dir, job_id)
    if job is None:
        return 3
    end_file = end_path(jobs_dir, job_id)
    started = time.time()

    def finish(state: str, exit_code: str, message: str = "") -> int:
        end = LocalEnd(
            job_id=job_id,
            state=state,
            exit_code=exit_code,
            start=stamp(started),
            end=stamp(),
            elapsed_seconds=round(time.time() - started, 3),
            message=message,
        )
        try:
            write_atomic(end_file, end)
        except OSError as exc:
            # A full disk: the end is kept on this machine, where the scheduler looks for it.
            print(f"local job {job_id}: {not_written(exc, end_file, end)}", file=sys.stderr)
            return EXIT_CODES["storage_full"]
        return 0

    if stop:
        return finish("CANCELLED", "0:15", "cancelled before it started")
    env = dict(os.environ)
    env.setdefault("THROUGHPUT_LOCAL_JOB_ID", job_id)
    with open(job.output, "ab") as out:
        try:
            child = subprocess.Popen(
                ["/bin/bash", job.script],
                cwd=job.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            out.write(f"local job {job_id}: cannot start: {exc}\n".encode())
            return finish("FAILED", "127:0", str(exc))
    reason = _supervise(child, job, started + job.time_limit_seconds, stop)
    _signal_session(child.pid, signal.SIGKILL)  # leftovers of the job, as Slurm's cgroup would
    rc = child.returncode
    exit_code = f"{rc}:0" if rc >= 0 else f"0:{-rc}"
    if reason == "TIMEOUT":
        return finish("TIMEOUT", exit_code, f"time limit of {job.time_limit_seconds:.0f} s reached")
    if reason == "CANCELLED":
        return finish("CANCELLED", exit_code, "cancelled")
    return finish("COMPLETED" if rc == 0 else "FAILED", exit_code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "run-job":
        print("usage: python -m throughput_sweep.node.local_job run-job JOBS_DIR JOB_ID", file=sys.stderr)
        return 2
    return run_job(Path(argv[1]), argv[2])


if __name__ == "__main__":
    sys.exit(main())
