"""status's additions without Slurm: GPU-hours from receipts, the lock's holder, profile
refusals, and `--resume --profile` on a local campaign that has run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from campaign_helpers import scripted_run, sweep
from throughput_schema import ClusterProfile, Receipt, WorkerResult
from throughput_schema.layout import Attempt
from throughput_schema.outcomes import SCHEDULER_PHASE, Crashed
from throughput_schema.recipe import load_recipe
from throughput_schema.records import WorkerIdentity
from throughput_slurm.sacct import AccountingRow, job_accounting
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.locking import CampaignLock, probe, watcher_line
from throughput_sweep.usage import gpu_hours

ROOT = Path(__file__).resolve().parents[3]
SLURM = ClusterProfile(name="t", scheduler="slurm", gpus_per_job=2)


def info(batch: int, row: AccountingRow | None, receipt: bool = True) -> AttemptInfo:
    rec = (
        Receipt(
            token=f"t{batch}",
            job_id=str(batch),
            submitted_at="2026-01-01T00:00:00+00:00",
            scheduler="slurm",
            accounting=job_accounting(row) if row is not None else None,
            accounting_final=row is not None,
        )
        if receipt
        else None
    )
    return AttemptInfo(Attempt(Path(f"b{batch}"), "20m", 512, batch, 1, None, rec, None, None))


def test_gpu_hours_sum_elapsed_times_the_allocated_gpus():
    infos = [
        info(1, AccountingRow(job_id="1", elapsed="01:30:00", alloc_tres="billing=8,cpu=8,gres/gpu=1,mem=64G,node=1")),
        info(2, AccountingRow(job_id="2", elapsed="1-00:00:00", alloc_tres="cpu=8,gres/gpu=4,gres/gpu:h100=4")),
        # no gres/gpu in AllocTRES (a row sacct has not completed yet): the profile's 2 GPUs
        info(4, AccountingRow(job_id="4", elapsed="00:15:00")),
        # a site tracking only typed GPUs (AccountingStorageTRES=gres/gpu:h100): 2 GPUs
        info(32, AccountingRow(job_id="32", elapsed="02:00:00", alloc_tres="cpu=16,gres/gpu:h100=2,node=1")),
        info(8, None),  # still out: no accounting yet
        info(16, None, receipt=False),  # refused: never a job
    ]
    used = gpu_hours(infos, SLURM)
    assert used.hours == pytest.approx(1.5 * 1 + 24 * 4 + 0.25 * 2 + 2 * 2)
    assert (used.jobs, used.unknown) == (4, 1)
    line = used.line()
    assert line.startswith("GPU-hours so far: 102.00 over 4 job(s)") and "sacct's Elapsed" in line
    assert "1 job(s) not counted yet" in line
    assert gpu_hours([], SLURM).line() == "GPU-hours so far: 0 (no job has been accepted)"
    local = ClusterProfile(name="l", scheduler="local")
    assert "local job registry" in gpu_hours(infos[:1], local).line()


def test_an_unreadable_elapsed_counts_as_not_yet_known():
    used = gpu_hours([info(1, AccountingRow(job_id="1", elapsed="garbage")), info(2, AccountingRow(job_id="2"))], SLURM)
    assert (used.hours, used.jobs, used.unknown) == (0.0, 0, 2)


def test_the_lock_names_a_live_holder_and_a_stale_one(tmp_path):
    assert probe(tmp_path) == probe(tmp_path) and not probe(tmp_path).held
    with CampaignLock(tmp_path):
        state = probe(tmp_path)
        assert state.held and state.holder.startswith(f"pid {os.getpid()} on ")
        assert watcher_line(state, "resume", done=False).startswith(f"a watcher is running (pid {os.getpid()}")
    released = probe(tmp_path)
    assert not released.held and released.holder == ""  # a clean exit leaves no name behind
    assert watcher_line(released, "RESUME", done=False) == "no watcher is running; resume with: RESUME"
    (tmp_path / "watcher.lock").write_text("4321 login9\n")  # a SIGKILLed watcher's file
    stale = watcher_line(probe(tmp_path), "RESUME", done=False)
    assert stale.startswith("no watcher is running (stale lock of pid 4321 on login9") and stale.endswith("RESUME")


def test_resume_with_another_profile_once_jobs_ran_says_the_profile_is_frozen(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"default": "ok", "ok_seconds": 0.05}))
    out = tmp_path / "camp"
    first = sweep(*scripted_run(out, 512, max_batch=1, poll_max=1), plan=plan)
    assert first.returncode == 0, first.stderr
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(dict(name="other", scheduler="local", python=sys.executable, mem="")))
    before = (out / "manifest.json").read_bytes()
    refused = sweep("run", "--output", out, "--resume", "--profile", other, plan=plan)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    assert "froze its profile 'local'" in line and "jobs have been submitted" in line and "new --output" in line
    assert (out / "manifest.json").read_bytes() == before
    status = sweep("status", "--output", out, plan=plan)
    assert status.returncode == 0, status.stderr
    assert "GPU-hours so far: 0.00 over 1 job(s)" in status.stdout and "local job registry" in status.stdout
    assert "no watcher is running" in status.stdout and "resume with" not in status.stdout  # done: nothing to resume
    readme = sweep("collect", "--output", out, plan=plan)
    assert readme.returncode == 0, readme.stderr
    assert "GPU-hours so far: 0.00 over 1 job(s)" in (out / "README.md").read_text()


def test_a_blocked_curve_gets_the_retry_command_in_status_and_the_readme(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"default": "ok", "ok_seconds": 0.05, "points": {"20m-c512-b1@1": "crash"}}))
    out = tmp_path / "camp"
    first = sweep(*scripted_run(out, 512, max_batch=1, poll_max=1), plan=plan)
    assert first.returncode == 3, first.stderr
    retry = f"run --output {out} --resume --retry-failed"
    shown = sweep("status", "--output", out, plan=plan)
    assert shown.stdout.rstrip().splitlines()[-1].endswith(retry) and "blocked curves: 20m-c512" in shown.stdout
    assert "frozen profile" not in shown.stdout  # a crash is not the profile's fault
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    assert f"then retry with: throughput-sweep {retry}**" in (out / "README.md").read_text()


def test_resume_profile_while_nothing_ran_replaces_a_profile_edited_in_place(tmp_path):
    import msgspec

    from throughput_schema import Protocol, read
    from throughput_schema.campaigns import Manifest
    from throughput_sweep.freezing import create
    from throughput_sweep.frozen_profile import resume_profile
    from throughput_sweep.planning import plan_throughput
    from throughput_sweep.profiles import load_profile

    local = load_profile("local", ROOT)
    before = msgspec.structs.replace(local, cpus_per_task=3)  # what "local" said when the campaign was made
    campaign = create(
        plan_throughput(
            tmp_path / "c",
            models=["tiny"],
            contexts=[128],
            protocol=Protocol(),
            profile=before,
            max_batch=1,
            worker="tiny_llm",
            root=ROOT,
        )
    )
    dry, replaced = resume_profile(campaign, "local", ROOT, write=False)
    assert replaced and dry.manifest.profile == local
    assert read(campaign.root / "manifest.json", Manifest).profile == before  # a dry run writes nothing
    done, replaced = resume_profile(campaign, "local", ROOT, write=True)
    manifest = read(campaign.root / "manifest.json", Manifest)
    assert replaced and manifest == done.manifest and manifest.profile == local
    [entry] = manifest.profile_replacements
    assert entry.old == before and entry.new_name == "local" and entry.old_sha256 != entry.new_sha256
    assert resume_profile(done, "local", ROOT, write=True) == (done, False)  # the same again: nothing to do
    assert resume_profile(done, None, ROOT, write=True) == (done, False)


# A result the controller wrote carries SCHEDULER_PHASE, whatever the scheduler: status
# names the scheduler the job ran on.
@pytest.mark.parametrize("scheduler", ["local", "slurm"])
def test_a_result_the_controller_wrote_names_the_scheduler_the_job_ran_on(scheduler):
    phase = SCHEDULER_PHASE
    receipt = Receipt(token="t", job_id="3", submitted_at="2026-01-01T00:00:00+00:00", scheduler=scheduler)
    recipe = load_recipe(ROOT / "configs/tiny.yaml")
    result = WorkerResult(
        outcome=Crashed(phase=phase, message="job 3 ended FAILED"),
        recipe=recipe,
        parameters=1,
        worker=WorkerIdentity(module="tiny_llm"),
    )
    shown = AttemptInfo(Attempt(Path("b1"), "tiny", 128, 1, 1, None, receipt, result, None)).message
    assert shown == f"{scheduler} job 3 ended FAILED"
