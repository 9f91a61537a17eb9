"""The embedded local scheduler with real detached processes (no Slurm, no GPU)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from throughput_schema import ClusterProfile, read
from throughput_schema.local_jobs import LocalJob
from throughput_sweep.node.host import detect_gpus, proc_start_time
from throughput_sweep.schedulers.base import JobStatus
from throughput_sweep.schedulers.local import LocalScheduler

PROFILE = ClusterProfile(name="local", scheduler="local", mem="", cpus_per_task=8)


def script(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.sh"
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body + "\n")
    return path


async def wait_finished(sched: LocalScheduler, job_id: str, timeout: float = 30) -> JobStatus:
    with anyio.fail_after(timeout):
        while True:
            status = (await sched.poll([job_id]))[job_id]
            if status.finished:
                return status
            await anyio.sleep(0.1)


def test_submit_poll_completed_and_survive_restart(tmp_path):
    work = tmp_path / "attempt"
    job = script(work, 'echo "out $THROUGHPUT_LOCAL_JOB_ID"; sleep 1')

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        assert sched.slots == 1
        job_id = await sched.submit(job, token="tok-a", workdir=work)
        status = (await sched.poll([job_id]))[job_id]
        assert status.state == "running" and not status.accounting_final
        del sched  # the watcher goes away; a new one (a restart) must see the same job
        again = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        status = await wait_finished(again, job_id)
        third = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        status3 = (await third.poll([job_id]))[job_id]
        assert (await third.find_by_token(["tok-a", "tok-none"], since=None)) == {"tok-a": [job_id], "tok-none": []}
        return job_id, status, status3

    job_id, status, status3 = anyio.run(main)
    assert status.state == "completed" and status.accounting_final
    # The interface's record, straight from the registry: seconds, not Slurm's durations.
    acc = status.accounting
    assert acc.exit_code == 0 and acc.signal == 0 and acc.time_limit_seconds == 14 * 60
    assert acc.elapsed_seconds is not None and 0 <= acc.elapsed_seconds < 10 and status.said == "COMPLETED"
    # What the receipt keeps, as the audit rebuilds it from the registry.
    assert acc.state == "completed" and acc.start and acc.end
    raw = json.loads(acc.raw)  # the registry's own records, kept unread
    assert raw["job"]["token"] == "tok-a" and raw["end"]["exit_code"] == "0:0"
    assert status3 == status
    assert (work / f"local-{job_id}.out").read_text() == f"out {job_id}\n"
    # Times carry their UTC offset, so the instant survives an audit in another timezone.
    start, end = (datetime.fromisoformat(t) for t in (acc.start, acc.end))
    assert start.tzinfo is not None and end.tzinfo is not None
    assert 0 <= (end - start).total_seconds() < 60 and abs(time.time() - end.timestamp()) < 60
    # What the job really had, not the profile's 8 CPUs: nothing here limits CPUs or
    # memory, so the allocation is the machine's; the profile's request stays in the registry.
    record = read(tmp_path / ".local-jobs" / f"{job_id}.json", LocalJob)
    assert (record.cpus, record.machine_cpus) == (8, len(os.sched_getaffinity(0)))
    assert record.machine_mem.endswith("M") and record.mem == PROFILE.mem
    assert acc.allocation.cpus == record.machine_cpus and acc.allocation.gpus is None
    assert acc.allocation.memory_bytes == int(record.machine_mem[:-1]) << 20
    assert acc.allocation.nodes == record.host == socket.gethostname()


def test_failed_exit_code_and_unknown_id(tmp_path):
    job = script(tmp_path / "a", "exit 3")

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        job_id = await sched.submit(job, token="t", workdir=job.parent)
        status = await wait_finished(sched, job_id)
        other = (await sched.poll(["999"]))["999"]
        return status, other

    status, other = anyio.run(main)
    assert status.state == "failed" and status.accounting.exit_code == 3 and status.accounting.signal == 0
    assert other.state == "unknown" and not other.finished


def test_time_limit_gives_timeout_and_kills_the_whole_job(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    # The job leaves a background process in its own process group behind: the local
    # scheduler must still end it (the watchdog puts workers in their own groups).
    job = script(
        tmp_path / "a",
        f'python3 -c \'import os,time; os.setpgid(0,0); open("{pidfile}","w").write(str(os.getpid())); time.sleep(300)\' &\n'
        "wait",
    )

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[], time_limit_seconds=1.5, kill_wait_seconds=1)
        job_id = await sched.submit(job, token="t", workdir=job.parent)
        return await wait_finished(sched, job_id)

    t0 = time.monotonic()
    status = anyio.run(main)
    assert time.monotonic() - t0 < 15
    assert status.state == "timeout"
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert proc_start_time(pid) is None, "a process of the timed-out job survived"


def test_cancel(tmp_path):
    job = script(tmp_path / "a", "sleep 60")

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[], kill_wait_seconds=1)
        job_id = await sched.submit(job, token="t", workdir=job.parent)
        await anyio.sleep(0.3)
        await sched.cancel(job_id)
        status = await wait_finished(sched, job_id)
        await sched.cancel(job_id)  # cancelling a finished job is harmless
        return status

    assert anyio.run(main).state == "cancelled"


def test_cancel_before_the_wrapper_has_its_handlers_is_cancelled(tmp_path):
    """On a loaded machine cancel's SIGTERM can reach the wrapper while Python still starts,
    before it handles signals: the wrapper dies without an end record, and the job is still
    CANCELLED (the scheduler asked for it), not NODE_FAIL. A slow interpreter makes it certain."""
    job = script(tmp_path / "a", "sleep 60")
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 5\nexec "{sys.executable}" "$@"\n')
    slow.chmod(0o755)

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[], kill_wait_seconds=1, python=str(slow))
        job_id = await sched.submit(job, token="t", workdir=job.parent)
        await anyio.sleep(0.3)
        await sched.cancel(job_id)
        return await wait_finished(sched, job_id)

    status = anyio.run(main)
    assert status.state == "cancelled", status


def test_slots_per_gpu_and_waiting_for_a_free_slot(tmp_path):
    bodies = {}
    for i in range(3):
        bodies[i] = script(tmp_path / f"p{i}", 'echo "gpu=$CUDA_VISIBLE_DEVICES"; sleep 1')

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=["0", "1"])
        assert sched.slots == 2
        t0 = time.monotonic()
        ids = []
        for i in range(3):
            ids.append(await sched.submit(bodies[i], token=f"t{i}", workdir=bodies[i].parent))
        waited = time.monotonic() - t0
        for j in ids:
            await wait_finished(sched, j)
        return ids, waited

    ids, waited = anyio.run(main)
    assert waited >= 0.8  # the third job waited for a slot
    gpus = [(tmp_path / f"p{i}" / f"local-{j}.out").read_text().strip() for i, j in enumerate(ids)]
    assert gpus[:2] == ["gpu=0", "gpu=1"] and gpus[2] in ("gpu=0", "gpu=1")


def test_vanished_wrapper_is_node_fail(tmp_path):
    job = script(tmp_path / "a", "sleep 60")

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        job_id = await sched.submit(job, token="t", workdir=job.parent)
        record = read(sched._job_path(job_id), LocalJob)
        os.kill(record.wrapper_pid, signal.SIGKILL)  # as if the machine lost the wrapper
        await anyio.sleep(0.3)
        status = await wait_finished(sched, job_id)
        # The orphaned job script (started by this test) is ended by its session.
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and str(job) in (entry / "cmdline").read_text():
                    os.killpg(os.getsid(int(entry.name)), signal.SIGKILL)
            except OSError:
                pass
        return status

    status = anyio.run(main)
    assert status.state == "node_fail" and status.accounting_final


def test_unrecorded_wrapper_runs_nothing(tmp_path):
    """A watcher killed between spawning the wrapper and recording it: the job never runs."""
    import subprocess
    import sys

    import throughput_sweep.node.local_job as local_job

    jobs = tmp_path / ".local-jobs"
    jobs.mkdir()
    old = local_job.HANDSHAKE_SECONDS
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, throughput_sweep.node.local_job as l; l.HANDSHAKE_SECONDS = 0.5;"
            f"sys.exit(l.run_job(__import__('pathlib').Path({str(jobs)!r}), '1'))",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert local_job.HANDSHAKE_SECONDS == old
    assert proc.returncode == 3 and "never recorded" in proc.stdout
    assert not (jobs / "1.end.json").exists()


def test_detect_gpus_respects_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert detect_gpus() == ["2", "3"]


@pytest.mark.parametrize(
    ("gpus", "per", "limit", "slots"),
    [([], 1, 12, 1), (["0"], 1, 12, 1), (["0", "1", "2", "3"], 2, 12, 2), (["0", "1", "2", "3"], 1, 3, 3)],
)
def test_slot_count(tmp_path, gpus, per, limit, slots):
    profile = ClusterProfile(name="local", scheduler="local", gpus_per_job=per, max_concurrent_jobs=limit)
    assert LocalScheduler(profile, tmp_path, gpus=gpus).slots == slots


def test_job_outlives_a_sigkilled_watcher(tmp_path):
    """The submitting process dies hard; the job finishes and a new scheduler reports it."""
    import subprocess
    import sys

    job = script(tmp_path / "a", "sleep 1; echo done")
    code = (
        "import anyio, os, signal, sys\n"
        "from pathlib import Path\n"
        "from throughput_schema import ClusterProfile\n"
        "from throughput_sweep.schedulers.local import LocalScheduler\n"
        "async def main():\n"
        "    s = LocalScheduler.for_campaign(ClusterProfile(name='l', scheduler='local'), Path(sys.argv[1]), gpus=[])\n"
        "    print(await s.submit(Path(sys.argv[2]), token='tok-k', workdir=Path(sys.argv[2]).parent), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "anyio.run(main)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(job)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == -signal.SIGKILL
    job_id = proc.stdout.strip()

    async def main():
        sched = LocalScheduler.for_campaign(PROFILE, tmp_path, gpus=[])
        assert (await sched.find_by_token(["tok-k"], since=None)) == {"tok-k": [job_id]}
        return await wait_finished(sched, job_id)

    assert anyio.run(main).state == "completed"
    assert (job.parent / f"local-{job_id}.out").read_text() == "done\n"
