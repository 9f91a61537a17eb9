"""This host, as the local scheduler sees it: its processes and what it really gives a job.

The registry's records and its reader live in `throughput_schema.local_jobs`, since the
audit reads them too. The scheduler (`local`) and the wrapper (`local_job`) share what
is here, so neither imports the other.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["detect_gpus", "machine_cpus", "machine_mem", "proc_start_time"]


def machine_cpus() -> int:
    """CPUs a job started from this process may run on (it inherits the affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def machine_mem() -> str:
    """The memory a job may use, in Slurm's form ("24105M"): the container's cgroup limit
    when there is one, else the machine's; "" where neither can be read."""
    limits = []
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            limits.append(int(text) // 2**20)
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) // 1024)
    except (OSError, ValueError, IndexError):
        pass
    return f"{min(limits)}M" if limits else ""


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


def detect_gpus() -> list[str]:
    """Visible GPUs: CUDA_VISIBLE_DEVICES when set (empty = none), else `nvidia-smi -L`."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(g for g in out.stdout.splitlines() if g.startswith("GPU "))]
