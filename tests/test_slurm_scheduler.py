"""SlurmScheduler against the real local Slurm (tools/local-slurm.sh, fixture `local_slurm`)."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import anyio
import msgspec
import pytest
import yaml

from throughput_schema import (
    ClusterProfile,
    ModelConfig,
    PointSpec,
    Protocol,
    Recipe,
    TrainingConfig,
    WorkerRequest,
    WorkerResult,
    outcome_kind,
    read,
    write_atomic,
)
from throughput_slurm.sacct import job_accounting, raw_row
from throughput_sweep.attempt import job_script as attempt_script
from throughput_sweep.schedulers.base import JobStatus, SubmitFailed
from throughput_sweep.schedulers.slurm.backend import SlurmScheduler

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def profile() -> ClusterProfile:
    raw = yaml.safe_load((ROOT / "configs/clusters/local-slurm.yaml").read_text())
    return msgspec.convert(raw, ClusterProfile)


def token() -> str:
    return f"tst-{uuid.uuid4().hex[:12]}"


def job_script(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.sh"
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body + "\n")
    return path


def watchdog_job(profile: ClusterProfile, attempt: Path, worker_code: str, **fields) -> Path:
    """An attempt's request and batch script whose worker (a module in the campaign) runs `worker_code`."""
    import throughput_schema
    import throughput_sweep

    campaign = attempt.parent
    mods = campaign / "mods"
    mods.mkdir(parents=True, exist_ok=True)
    (mods / "test_job_worker.py").write_text(worker_code)
    srcs = [Path(throughput_schema.__file__).parents[1], Path(throughput_sweep.__file__).parents[1], mods]
    request = WorkerRequest(
        point=PointSpec(model="tiny", context_length=128, batch_size=1),
        recipe=Recipe(
            name="tiny",
            model=ModelConfig(n_layers=1, d_model=64, n_heads=1, ffn_dim=64, context_length=128),
            training=TrainingConfig(micro_batch_size=1, batch_tokens=128),
        ),
        protocol=Protocol(),
        campaign=str(campaign),
        python=sys.executable,
        pythonpath=[str(s) for s in srcs],
        worker="test_job_worker",
        deadline_seconds=fields.pop("deadline_seconds", profile.watchdog_minutes * 60),
        time_limit_seconds=profile.time_limit_minutes * 60,
        cpus=profile.cpus_per_task,
        result=str(attempt / "result.json"),
    )
    attempt.mkdir(parents=True, exist_ok=True)
    write_atomic(attempt / "request.json", request)
    script = attempt / "job.sh"
    script.write_text(attempt_script(request, profile=profile.name))
    return script


async def until_final(sched: SlurmScheduler, job_id: str, timeout: float = 60, cycles: list | None = None) -> JobStatus:
    with anyio.fail_after(timeout):
        while True:
            status = (await sched.poll([job_id]))[job_id]
            if cycles is not None:
                cycles.append(list(sched.commands_last_poll))
            if status.finished and status.accounting_final:
                return status
            await anyio.sleep(0.5)


def test_submit_poll_completed_with_final_accounting_and_find(local_slurm, profile, tmp_path):
    tok = token()
    script = job_script(tmp_path, 'echo "gpu=${CUDA_VISIBLE_DEVICES:-none} job=$SLURM_JOB_ID"')
    cycles: list[list[str]] = []

    async def main():
        sched = SlurmScheduler(profile)
        since = datetime.now()
        job_id = await sched.submit(script, token=tok, workdir=tmp_path)
        status = await until_final(sched, job_id, cycles=cycles)
        found = await sched.find_by_token([tok, token()], since)
        return job_id, status, found

    job_id, status, found = anyio.run(main)
    assert job_id.isdigit()
    assert status.state == "completed" and status.accounting_final
    acc = status.accounting
    assert acc.exit_code == 0 and acc.allocation.gpus == 1 and acc.time_limit_seconds == 14 * 60
    assert acc.elapsed_seconds is not None and status.said == "COMPLETED"
    row = raw_row(acc.raw)  # what the receipt keeps beside it: sacct's row as printed
    assert row is not None and job_accounting(row) == acc
    assert row.job_name == tok and row.exit_code == "0:0"
    assert row.account == profile.account and row.partition == profile.partition
    assert row.timelimit == "00:14:00"
    tres = dict(item.split("=", 1) for item in row.alloc_tres.split(","))
    assert tres["cpu"] == "8" and tres["gres/gpu"] == "1" and tres["mem"] == "64G"
    assert row.start and row.end and row.elapsed
    assert row.consumed_energy_raw in ("", "0")  # asked, but this Slurm runs no AcctGatherEnergyType plugin
    assert (tmp_path / f"slurm-{job_id}.out").read_text().startswith("gpu=")
    assert list(found.values()) == [[job_id], []]
    for cycle in cycles:
        assert cycle.count("squeue") <= 1 and cycle.count("sacct") <= 1, cycle


def test_poll_cycle_issues_at_most_one_squeue_and_one_sacct(local_slurm, profile, tmp_path):
    async def main():
        sched = SlurmScheduler(profile)
        ids = []
        for i in range(4):
            body = "true" if i % 2 == 0 else "sleep 20"
            ids.append(await sched.submit(job_script(tmp_path / f"j{i}", body), token=token(), workdir=tmp_path))
        ids.append("99999999")  # an id Slurm never had: squeue does not list it and sacct has no row
        seen = []
        for _ in range(6):
            before = sched.command_counts.copy()
            statuses = await sched.poll(ids)
            spent = sched.command_counts - before
            seen.append((dict(spent), {k: v.state for k, v in statuses.items()}))
            await anyio.sleep(1)
        for job_id in ids[:4]:
            await sched.cancel(job_id)
        return ids, seen

    ids, seen = anyio.run(main)
    for spent, states in seen:
        assert spent.get("squeue", 0) <= 1 and spent.get("sacct", 0) <= 1, spent
        assert set(spent) <= {"squeue", "sacct"}
        assert states["99999999"] == "gone"
    assert seen[-1][1][ids[0]] == "completed"
    assert seen[-1][1][ids[1]] in ("running", "pending")


def test_single_unknown_id_is_asked_of_sacct(local_slurm, profile):
    async def main():
        sched = SlurmScheduler(profile)
        statuses = await sched.poll(["99999998"])
        return statuses, sched.commands_last_poll

    statuses, commands = anyio.run(main)
    assert statuses["99999998"].state == "gone"
    assert commands == ["squeue", "sacct"]


def test_scancel_gives_cancelled(local_slurm, profile, tmp_path):
    async def main():
        sched = SlurmScheduler(profile)
        job_id = await sched.submit(job_script(tmp_path, "sleep 120"), token=token(), workdir=tmp_path)
        with anyio.fail_after(30):
            while (await sched.poll([job_id]))[job_id].state != "running":
                await anyio.sleep(0.3)
        await sched.cancel(job_id)
        status = await until_final(sched, job_id)
        await sched.cancel(job_id)  # a finished job: no error
        return status

    assert anyio.run(main).state == "cancelled"


def test_job_over_its_memory_is_out_of_memory(local_slurm, profile, tmp_path):
    small = msgspec.structs.replace(profile, mem="100M")
    body = f"{sys.executable} -c 'import time; b = b\"x\" * (500 * 2**20); time.sleep(5)'"

    async def main():
        sched = SlurmScheduler(small)
        job_id = await sched.submit(job_script(tmp_path, body), token=token(), workdir=tmp_path)
        return job_id, await until_final(sched, job_id, timeout=90)

    job_id, status = anyio.run(main)
    assert status.state == "out_of_memory", status
    assert raw_row(status.accounting.raw).req_mem.startswith("100M")


@pytest.mark.parametrize(("field", "value"), [("account", "no-such-account"), ("partition", "no-such-partition")])
def test_bad_account_or_partition_is_permanent(local_slurm, profile, tmp_path, field, value):
    bad = msgspec.structs.replace(profile, **{field: value})

    async def main():
        sched = SlurmScheduler(bad, backoff_seconds=0.1)
        await sched.submit(job_script(tmp_path, "true"), token=token(), workdir=tmp_path)

    with pytest.raises(SubmitFailed) as info:
        anyio.run(main)
    assert info.value.permanent and not info.value.maybe_submitted
    assert "sbatch refused the job" in str(info.value)


def test_watchdog_deadline_inside_a_real_allocation(local_slurm, profile, tmp_path):
    """job.sh -> watchdog -> a worker that hangs: the watchdog's timeout result, job FAILED 6:0."""
    attempt = tmp_path / "camp" / "a"
    script = watchdog_job(profile, attempt, "import time; time.sleep(120)", deadline_seconds=2)
    result = attempt / "result.json"

    async def main():
        sched = SlurmScheduler(profile)
        job_id = await sched.submit(script, token=token(), workdir=attempt)
        return job_id, await until_final(sched, job_id, timeout=60)

    job_id, status = anyio.run(main)
    assert status.state == "failed" and raw_row(status.accounting.raw).exit_code == "6:0"
    assert status.accounting.exit_code == 6
    assert outcome_kind(read(result, WorkerResult).outcome) == "timeout"
    assert "deadline" in (attempt / f"slurm-{job_id}.out").read_text()


@pytest.mark.slow  # a minute at least: Slurm's time limits are whole minutes
def test_job_over_its_time_limit_is_timeout(local_slurm, profile, tmp_path):
    short = msgspec.structs.replace(profile, time_limit_minutes=1)

    async def main():
        sched = SlurmScheduler(short)
        job_id = await sched.submit(job_script(tmp_path, "sleep 300"), token=token(), workdir=tmp_path)
        return await until_final(sched, job_id, timeout=180)

    t0 = time.monotonic()
    status = anyio.run(main)
    assert status.state == "timeout"
    assert raw_row(status.accounting.raw).timelimit == "00:01:00" and status.accounting.time_limit_seconds == 60
    assert time.monotonic() - t0 < 180


def _flaky_sbatch(folder: Path, *, submit_first: bool) -> Path:
    """Real sbatch behind a fault: the first call reports a socket time-out.

    With `submit_first` the job really reached Slurm before the error (the dangerous case:
    a blind retry would submit it twice); without it nothing was submitted.
    """
    marker = folder / "failed-once"
    first = 'sbatch "$@" >/dev/null' if submit_first else ":"
    path = folder / "flaky-sbatch"
    path.write_text(
        "#!/bin/bash\n"
        f"if [ ! -e {marker} ]; then touch {marker}; {first}\n"
        '  echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1\n'
        "fi\n"
        'exec sbatch "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("submit_first", [True, False])
def test_transient_sbatch_failure_is_retried_exactly_once(local_slurm, profile, tmp_path, submit_first):
    tok = token()
    flaky = _flaky_sbatch(tmp_path, submit_first=submit_first)

    async def main():
        sched = SlurmScheduler(profile, commands={"sbatch": str(flaky)}, backoff_seconds=0.2)
        since = datetime.now()
        job_id = await sched.submit(job_script(tmp_path / "j", "true"), token=tok, workdir=tmp_path)
        await until_final(sched, job_id)
        return job_id, await sched.find_by_token([tok], since), sched.command_counts["sbatch"]

    job_id, found, sbatch_calls = anyio.run(main)
    assert found == {tok: [job_id]}  # one job for the token, never two
    assert sbatch_calls == (1 if submit_first else 2)


def test_watchdog_records_cancelled_on_scancel(local_slurm, profile, tmp_path):
    """scancel signals the whole job; the watchdog writes `cancelled` before Slurm's KillWait ends."""
    attempt = tmp_path / "camp" / "a"
    started = attempt / "started"
    worker = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(120)"
    script = watchdog_job(profile, attempt, worker)
    result = attempt / "result.json"

    async def main():
        sched = SlurmScheduler(profile)
        job_id = await sched.submit(script, token=token(), workdir=attempt)
        with anyio.fail_after(30):
            while not started.exists():
                await anyio.sleep(0.2)
        await sched.cancel(job_id)
        return await until_final(sched, job_id)

    status = anyio.run(main)
    assert status.state == "cancelled"
    assert outcome_kind(read(result, WorkerResult).outcome) == "cancelled"
