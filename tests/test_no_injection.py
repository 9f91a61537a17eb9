"""No value from a config, a profile, a path or a user ever runs as shell code.

Hostile strings (spaces, quotes, `$()`, backticks, `;`, newlines) go into the campaign path,
the profile fields and the protocol; they reach sbatch as argv items and the job script only
shell-quoted. Every hostile string tries to create a canary file; the tests look for it
everywhere it could appear. Campaign files are never writable by group or others.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from campaign_helpers import BLOCKED, ROOT, check_campaign, profile, sweep, write_plan

CANARY = f"pwned-{secrets.token_hex(3)}"


def hostile(tag: str) -> str:
    """A string that would create the canary if any shell ever evaluated it."""
    return (
        f"{tag} $(touch {CANARY}-a) `touch {CANARY}-b` ' \" ; touch {CANARY}-c ;\n"
        f"touch {CANARY}-d # && touch {CANARY}-e | touch {CANARY}-f $HOME"
    )


def canaries(*folders: Path) -> list[Path]:
    found = []
    for folder in (*folders, ROOT, Path.cwd(), Path("/tmp"), Path.home()):
        found += [p for p in folder.glob(f"{CANARY}*")]
        if folder not in (ROOT, Path("/tmp"), Path.home()):
            found += [p for p in folder.rglob(f"{CANARY}*")]
    return found


def assert_private(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        if p.is_symlink():
            continue
        assert not p.stat().st_mode & 0o022, f"{p} is writable by group or others ({p.stat().st_mode:o})"


FAST = ["--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "1", "--no-progress"]


def test_job_script_quotes_every_value_and_runs_none(tmp_path):
    """The rendered script, run by bash with a hostile campaign path, profile, python and worker: every
    argument arrives intact as data (a fake python records its argv) and nothing else runs."""
    from throughput_schema import (
        ClusterProfile,
        ModelConfig,
        PointSpec,
        Protocol,
        Recipe,
        TrainingConfig,
        WorkerRequest,
        read,
        write_atomic,
    )
    from throughput_sweep.attempt import job_script
    from throughput_sweep.schedulers.slurm.backend import sbatch_argv

    camp = tmp_path / hostile("camp").replace("/", "_")
    camp.mkdir()
    record = tmp_path / "argv.json"
    fake_python = camp / hostile("py").replace("/", "_")
    fake_python.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}, open({str(record)!r}, 'w'))\n"
    )
    fake_python.chmod(0o755)
    prof = ClusterProfile(
        name=hostile("name"),
        scheduler="slurm",
        account=hostile("acct"),
        partition=hostile("part"),
        mem=hostile("mem"),
        python=str(fake_python),
        extra_submit_args=[hostile("extra")],
    )
    attempt = camp / "curves/20m-c512/b1/attempt-1"
    request = WorkerRequest(
        point=PointSpec(model="20m", context_length=512, batch_size=1, attempt=1),
        recipe=Recipe(
            name=hostile("recipe"),
            model=ModelConfig(n_layers=1, d_model=64, n_heads=1, ffn_dim=64, context_length=512),
            training=TrainingConfig(micro_batch_size=1, batch_tokens=512),
        ),
        protocol=Protocol(),
        campaign=str(camp),
        python=str(fake_python),
        pythonpath=[str(camp / "src")],
        worker=hostile("worker"),
        result=str(attempt / "result.json"),
    )
    write_atomic(attempt / "request.json", request)
    script = job_script(request, profile=prof.name)
    (camp / "job.sh").write_text(script)
    subprocess.run(["bash", str(camp / "job.sh")], cwd=tmp_path, check=True, timeout=60)
    got = json.loads(record.read_text())
    assert got["cwd"] == str(camp)
    assert got["argv"] == ["-m", "throughput_sweep.node.watchdog", "--request", str(attempt / "request.json")]
    assert read(got["argv"][-1], WorkerRequest).worker == hostile("worker")
    argv = sbatch_argv(prof, camp / "job.sh", token="tok", workdir=camp)
    assert f"--account={hostile('acct')}" in argv and f"--partition={hostile('part')}" in argv
    assert hostile("extra") in argv
    assert not canaries(tmp_path), canaries(tmp_path)


@pytest.mark.slow  # a whole campaign
def test_local_campaign_in_a_hostile_folder(tmp_path):
    """A whole campaign on the local scheduler whose output path is hostile: it completes, every
    file is private, and no canary appears."""
    out = tmp_path / hostile("camp").replace("/", "_")
    plan = write_plan(tmp_path, {"20m-c512-b2": "cuda_oom"}, ok_seconds=0.05)
    r = sweep("run", "--output", out, "--models", "20m", "--contexts", "512", *FAST, plan=plan)
    assert r.returncode == 0, r.stderr
    assert "bounded" in sweep("status", "--output", out).stdout
    assert sweep("collect", "--output", out).returncode == 0
    assert not canaries(tmp_path), canaries(tmp_path)
    assert_private(out)


@pytest.mark.slurm
@pytest.mark.slow
def test_real_sbatch_with_a_hostile_output_path_and_hostile_profile_strings(local_slurm, tmp_path):
    """Through the real sbatch: a hostile campaign path runs to the end (private files, no
    canary); hostile account and partition strings are refused by Slurm as a clear, permanent
    failure that blocks the curve, again with no canary."""
    since = datetime.now() - timedelta(seconds=2)
    plan = write_plan(tmp_path, {"20m-c512-b2": "cuda_oom"}, ok_seconds=0.05)
    out = tmp_path / hostile("camp").replace("/", "_")
    r = sweep(
        "run", "--output", out, "--models", "20m", "--contexts", "512", "--profile", profile(tmp_path), *FAST, plan=plan
    )
    assert r.returncode == 0, r.stderr
    assert check_campaign(out, since) == {"20m-c512": "bounded"}
    assert list(out.glob("curves/20m-c512/b1/attempt-1/slurm-*.out"))
    assert_private(out)

    bad = tmp_path / "bad"
    prof = profile(tmp_path, "hostile.yaml", account=hostile("acct"), partition=hostile("part"), name=hostile("name"))
    r = sweep(
        "run",
        "--output",
        bad,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--profile",
        prof,
        *FAST,
        "--no-preflight",
        plan=plan,
        timeout=120,
    )
    assert r.returncode == BLOCKED, r.stderr
    assert "sbatch refused the job" in r.stderr
    assert check_campaign(bad, since) == {"20m-c512": "blocked"}
    settled = json.loads((bad / "curves/20m-c512/b1/attempt-1/settlement.json").read_text())
    assert settled["state"] == "refused" and "\n" not in settled["reason"]
    assert not canaries(tmp_path), canaries(tmp_path)
    assert_private(bad)
