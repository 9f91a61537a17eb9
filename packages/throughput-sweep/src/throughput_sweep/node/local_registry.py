"""The local scheduler's job registry: a folder of files that outlives the watcher.

    <campaign>/.local-jobs/      LOCAL_JOBS_DIR
      <id>.json      the job (`LocalJob`): token, script, workdir, slot, GPUs, time limit,
                     and the wrapper's pid with its /proc start time (defeats pid reuse);
                     written by `LocalScheduler.submit` right after spawning the wrapper.
      <id>.end.json  how it ended (`LocalEnd`): state, exit code "rc:signal", start, end;
                     written by the wrapper (`local_job`), or by `poll` as NODE_FAIL when
                     the wrapper vanished without one, e.g. after a reboot or a SIGKILL of
                     the wrapper.
      <id>.log       the wrapper's own messages.

All files are written atomically. The scheduler (`local`) and the wrapper (`local_job`)
both import this module, so neither imports the other.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import msgspec

__all__ = ["LOCAL_JOBS_DIR", "LocalEnd", "LocalJob", "end_path", "job_path", "proc_start_time"]

LOCAL_JOBS_DIR = ".local-jobs"


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
    cpus: int = 0
    mem: str = ""


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


def _stamp(when: float | None = None) -> str:
    """Local time like sacct's, but with its UTC offset: the registry travels with the
    campaign, and an audit in another timezone must read the same instant."""
    return datetime.fromtimestamp(time.time() if when is None else when).astimezone().isoformat(timespec="seconds")


def _elapsed(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def proc_start_time(pid: int) -> int | None:
    """Start time of a live, non-zombie process (clock ticks since boot); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X", "x"):
        return None
    return int(fields[19])


def _alive(pid: int, start: int) -> bool:
    if Path("/proc/self/stat").exists():
        return proc_start_time(pid) == start if start else proc_start_time(pid) is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
