"""A site's sbatch wrapper that prints around the job id, on the real Slurm.

Each case puts a real wrapper script named `sbatch` first on PATH; it runs the real sbatch
(the one the local Slurm put on PATH) and prints notices around its `--parsable` answer,
as sites do. Every job a campaign submits must end with exactly one receipt naming it,
no point is submitted twice, and the run says "every curve has ended" only then.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import (
    assert_exactly_one_job_per_point,
    profile,
    sacct_jobs,
    scripted_run,
    sweep,
    wait_for,
    watching,
    write_plan,
)

pytestmark = [pytest.mark.slurm]

# What the wrapper prints on stdout, `$id` being the real sbatch's answer (`JOBID`).
PRINTS = {
    # handled before: the id is the last line
    "before": ["NOTICE: welcome to the cluster", "$id"],
    "after": ["$id", "NOTICE: this cluster charges GPU-hours"],
    "both": ["NOTICE: welcome to the cluster", "$id", "NOTICE: this cluster charges GPU-hours"],
    "federation": ["$id;cluster", "NOTICE: this cluster charges GPU-hours"],
    # no line is a job id: the job is found by its token
    "prose": ["Submitted batch job $id to the GPU partition"],
    # two lines look like a job id: the job is found by its token
    "two-numbers": ["2026", "$id"],
}


def wrapper(bin_dir: Path, lines: list[str]) -> Path:
    """`sbatch` in `bin_dir`: the real one, its stdout kept, `lines` printed in its place."""
    real = shutil.which("sbatch")
    assert real is not None, "the local Slurm puts sbatch on PATH"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    body = "\n".join(f'printf "%s\\n" "{line}"' for line in lines)
    script.write_text(
        "#!/bin/sh\n"
        f'id=$("{real}" "$@")\n'
        "rc=$?\n"
        'if [ "$rc" -ne 0 ]; then printf "%s\\n" "$id"; exit "$rc"; fi\n'
        f"{body}\n"
    )
    script.chmod(0o755)
    return script


def campaign_jobs(campaign: Path, since: datetime) -> dict[str, list[str]]:
    """token -> the ids of the jobs sacct holds under it, for every intent of the campaign."""
    tokens = {json.loads(p.read_text())["token"] for p in campaign.glob("curves/*/b*/attempt-*/intent.json")}
    jobs: dict[str, list[str]] = {t: [] for t in tokens}
    for row in sacct_jobs(since):
        if row["name"] in jobs:
            jobs[row["name"]].append(row["job_id"])
    return jobs


def held_jobs(tokens: list[str]) -> list[str]:
    """The queued jobs named by these tokens (sacct's time window leaves a held job out)."""
    if not tokens:
        return []
    out = subprocess.run(
        ["squeue", "-h", "--states=PENDING", f"--name={','.join(tokens)}", "-o", "%i"], capture_output=True, text=True
    )
    return out.stdout.split()


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=[pytest.mark.slurm2411] if c in ("after", "prose") else []) for c in PRINTS]
)
def test_a_wrapper_printing_around_the_job_id_gives_every_job_one_receipt(local_slurm, tmp_path, monkeypatch, case):
    since = datetime.now() - timedelta(seconds=2)
    wrapper(tmp_path / "bin", PRINTS[case])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    plan = write_plan(tmp_path, {})
    out = tmp_path / "camp"
    run = sweep(*scripted_run(out, 512, max_batch=2, profile=profile(tmp_path), poll_max=1), plan=plan)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every curve has ended" in run.stderr, run.stderr
    assert "failed" not in run.stderr, run.stderr

    receipts = {p.parent: json.loads(p.read_text())["job_id"] for p in out.glob("curves/*/b*/attempt-*/receipt.json")}
    attempts = sorted(p.parent for p in out.glob("curves/*/b*/attempt-*/intent.json"))
    assert [a.relative_to(out).as_posix() for a in attempts] == [
        "curves/20m-c512/b1/attempt-1",
        "curves/20m-c512/b2/attempt-1",
    ]
    assert sorted(receipts) == attempts, "every submitted attempt has its receipt"
    assert_exactly_one_job_per_point(out, since)
    jobs = campaign_jobs(out, since)
    assert sorted(j for ids in jobs.values() for j in ids) == sorted(receipts.values()), (jobs, receipts)


@pytest.mark.slurm2411
def test_a_job_that_ran_before_its_lookup_could_answer_gets_its_receipt_before_the_run_ends(
    local_slurm, tmp_path, monkeypatch
):
    """sbatch's answer holds no id line, and squeue fails from the first sbatch until the job
    has written its result (a busy controller), so no lookup by token can answer before the
    job has ended: the watcher adopts it all the same before the run ends, which ends complete."""
    since = datetime.now() - timedelta(seconds=2)
    bin_dir = tmp_path / "bin"
    sbatch = wrapper(bin_dir, PRINTS["prose"])
    busy, out = tmp_path / "busy", tmp_path / "camp"
    sbatch.write_text(sbatch.read_text().replace("#!/bin/sh\n", f'#!/bin/sh\ntouch "{busy}"\n', 1))
    squeue = bin_dir / "squeue"
    # The first squeue after sbatch fails even where the job has already written its result
    # (a fast node), so the lookup that comes too soon is always the one tested.
    refused = tmp_path / "refused"
    squeue.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{busy}" ] && {{ [ ! -e "{refused}" ] || '
        f'! ls "{out}"/curves/*/b*/attempt-*/result.json >/dev/null 2>&1; }}; then\n'
        f'    touch "{refused}"\n'
        '    echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1\n'
        "fi\n"
        f'exec "{shutil.which("squeue")}" "$@"\n'
    )
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    run = sweep(
        *scripted_run(out, 512, max_batch=1, profile=profile(tmp_path), poll_max=1), plan=write_plan(tmp_path, {})
    )
    receipts = [json.loads(p.read_text()) for p in out.glob("curves/*/b*/attempt-*/receipt.json")]
    assert len(receipts) == 1, run.stdout + run.stderr
    [receipt] = receipts
    assert receipt["adopted"] and receipt["accounting_final"], receipt
    assert run.returncode == 0 and "every curve has ended" in run.stderr, run.stdout + run.stderr
    assert "could not be looked up by its token" in run.stderr, run.stderr  # the lookup that came too soon
    assert_exactly_one_job_per_point(out, since)
    assert sorted(j for ids in campaign_jobs(out, since).values() for j in ids) == [receipt["job_id"]]


def test_a_job_that_ran_without_a_receipt_keeps_the_campaign_incomplete_until_it_is_recorded(
    local_slurm, tmp_path, monkeypatch
):
    """A wrapper that submits each job twice (the second held) and prints no id line: two jobs
    carry the token, so none is adopted. Once the first one has run, neither `status` nor
    `run --resume` calls the campaign complete, and both name the attempt and the commands;
    `reconcile` records the job that ran, and the resumed run ends complete."""
    since = datetime.now() - timedelta(seconds=2)
    bin_dir = tmp_path / "bin"
    sbatch = wrapper(bin_dir, PRINTS["prose"])
    real = shutil.which("sbatch")
    sbatch.write_text(sbatch.read_text().replace("rc=$?\n", f'rc=$?\n"{real}" --hold "$@" >/dev/null\n', 1))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "camp"
    plan = write_plan(tmp_path, {})
    try:
        run = sweep(*scripted_run(out, 512, max_batch=1, profile=profile(tmp_path), poll_max=1), plan=plan)
        assert "2 jobs carry token" in run.stderr, run.stderr
        attempt = out / "curves/20m-c512/b1/attempt-1"
        wait_for((attempt / "result.json").exists, 60, "the job that ran to write its result")
        token = json.loads((attempt / "intent.json").read_text())["token"]
        named = f"curves/20m-c512/b1/attempt-1 (token {token})"
        status = sweep("status", "--output", out)
        assert status.returncode == 4, status.stdout + status.stderr
        assert "INCOMPLETE" in status.stdout and named in status.stdout, status.stdout

        resumed = sweep("run", "--output", out, "--resume", *watching(1), plan=plan)
        assert resumed.returncode == 4, resumed.stdout + resumed.stderr
        assert "every curve has ended" not in resumed.stderr
        assert f"1 job(s) ran without a receipt, so the campaign is not complete: {named}" in resumed.stderr
        assert f"reconcile --output {out} --token TOKEN --job-id ID" in resumed.stderr

        # The job writes its result before it exits: sacct records it COMPLETED a moment later.
        def completed() -> list[str]:
            return [r["job_id"] for r in sacct_jobs(since) if r["name"] == token and r["state"] == "COMPLETED"]

        try:
            [ran] = wait_for(completed, 60, "sacct to record the job that ran as COMPLETED")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; sacct has {sacct_jobs(since)}") from None
        assert len(held_jobs([token])) == 1
        done = sweep("reconcile", "--output", out, "--token", token, "--job-id", ran)
        assert done.returncode == 0, done.stderr
        final = sweep("run", "--output", out, "--resume", *watching(1), plan=plan)
        assert final.returncode == 0 and "every curve has ended" in final.stderr, final.stdout + final.stderr
        assert json.loads((attempt / "receipt.json").read_text())["accounting_final"]
    finally:  # the held duplicate, and only it
        held = held_jobs(list(campaign_jobs(out, since)))
        if held:
            subprocess.run(["scancel", *held], check=False)
