"""The local Slurm of tools/local-slurm.sh behaves like the production clusters need.

Real sbatch/squeue/sacct/scancel against a real slurmctld; nothing is mocked.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

# The job shape of configs/clusters/local-slurm.yaml.
JOB_SHAPE = ["--gpus=1", "--cpus-per-task=8", "--mem=64G", "--time=14"]
SACCT_FIELDS = ["JobID", "JobName", "Partition", "Account", "State", "ExitCode", "AllocTRES", "Timelimit", "Comment"]


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout


def _token() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _sbatch(local_slurm, name: str, script: str, output: Path | None = None) -> str:
    args = [
        "sbatch", "--parsable", *JOB_SHAPE,
        f"--account={local_slurm.account}", f"--partition={local_slurm.partition}",
        f"--job-name={name}", f"--comment={name}",
        f"--output={output or '/dev/null'}", "--wrap", script,
    ]  # fmt: skip
    return _run(*args).strip().split(";")[0]


def _squeue_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """job id -> (state, reason); jobs squeue no longer knows are left out."""
    out = _run("squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%r")
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {job_id: (state, reason) for job_id, state, reason in rows}


def _final_sacct_row(job_id: str, timeout: float = 60) -> dict[str, str]:
    """The job's sacct row once it has ended and sacct has caught up (it lags a few s)."""
    deadline = time.monotonic() + timeout
    row: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = _run("sacct", "-j", job_id, "-X", "-n", "--parsable2", f"--format={','.join(SACCT_FIELDS)}")
        lines = [line for line in out.splitlines() if line.strip()]
        if lines:
            row = dict(zip(SACCT_FIELDS, lines[0].split("|"), strict=True))
            ended = row["State"] not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING")
            if ended and row["JobName"] not in ("", "allocation") and row["Partition"]:
                return row
        time.sleep(0.5)
    pytest.fail(f"sacct never showed a final row for job {job_id}; last: {row}")


def test_gpu_job_runs_and_is_accounted(local_slurm, tmp_path):
    token = _token()
    output = tmp_path / "job.out"
    job_id = _sbatch(local_slurm, token, 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"', output)

    row = _final_sacct_row(job_id)

    assert row["State"] == "COMPLETED", row
    assert row["ExitCode"] == "0:0", row
    tres = dict(item.split("=", 1) for item in row["AllocTRES"].split(","))
    assert tres["cpu"] == "8", row
    assert tres["gres/gpu"] == "1", row
    assert tres["mem"] == "64G", row
    assert row["Timelimit"] == "00:14:00", row
    assert row["Account"] == local_slurm.account
    assert row["Partition"] == local_slurm.partition
    assert row["JobName"] == token
    assert row["Comment"] == token
    # One of the 16 fake GPUs was handed to the job (which one depends on earlier jobs).
    name, _, value = output.read_text().strip().partition("=")
    assert name == "CUDA_VISIBLE_DEVICES"
    assert value.isdigit() and 0 <= int(value) < 16, value


def _queued_job_ids() -> set[str]:
    return set(_run("squeue", "-h", "-o", "%i").split())


def _wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
@pytest.mark.slurm_exclusive
def test_sixteen_jobs_run_at_once_and_a_seventeenth_waits(local_slurm):
    # The node admits exactly 16 jobs of this shape, more than the profile's 12, so that only
    # the watcher keeps a campaign at 12; other people's jobs (the cluster is
    # shared on a dev machine) would skew the count, so wait for a quiet queue.
    if not _wait_until(lambda: not _queued_job_ids(), timeout=30):
        pytest.skip("the local Slurm queue is busy with other jobs")

    token = _token()
    job_ids = [_sbatch(local_slurm, f"{token}-{i}", "sleep 20") for i in range(17)]
    try:
        deadline = time.monotonic() + 20
        states: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            states = _squeue_states(job_ids)
            if sum(state == "RUNNING" for state, _ in states.values()) >= 16:
                break
            time.sleep(0.3)
        # Let the scheduler run another pass: the 17th must still wait.
        time.sleep(3)
        states = _squeue_states(job_ids)
        foreign = _queued_job_ids() - set(job_ids)
        running = [j for j in job_ids if states.get(j, ("", ""))[0] == "RUNNING"]
        pending = [j for j in job_ids if states.get(j, ("", ""))[0] == "PENDING"]
        if foreign and len(running) != 16:
            pytest.skip(f"other jobs {sorted(foreign)} took slots during the test")
        assert len(running) == 16, states
        assert len(pending) == 1, states
        assert states[pending[0]][1] in ("Resources", "Priority"), states
    finally:
        subprocess.run(["scancel", *job_ids], check=False, timeout=60)
    # Cancelled jobs leave the node free again for the tests that follow.
    assert _wait_until(lambda: not (_queued_job_ids() & set(job_ids)), timeout=30), "jobs still queued after scancel"
