"""A scheduler the project does not ship (tests/plain_scheduler.py), registered by the test
alone, runs a whole campaign with the scripted worker and passes its audit: a new scheduler
is its own modules and its registry lines, nothing else."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import msgspec
import pytest
import yaml

from campaign_helpers import scripted_run, write_plan
from plain_scheduler import NAME, PlainScheduler, read_plain, register
from throughput_audit.accounting_readers import READERS
from throughput_audit.audit import run_audit
from throughput_schema import ClusterProfile
from throughput_schema.scheduler_names import SCHEDULER_NAMES, UnknownScheduler
from throughput_sweep.campaign import CampaignError
from throughput_sweep.cli import main as sweep
from throughput_sweep.profiles import PROFILE_ENV, choose_profile
from throughput_sweep.schedulers import BACKENDS, backend

pytestmark = pytest.mark.slow  # a whole campaign on plain processes

ROOT = Path(__file__).resolve().parents[1]


def test_the_name_ships_nowhere():
    assert NAME not in SCHEDULER_NAMES
    assert NAME not in json.dumps(msgspec.json.schema(ClusterProfile))
    quoted = re.compile(rf"[\"']{NAME}[\"']|PlainScheduler|plain_scheduler")
    shipped = [p for p in ROOT.glob("packages/*/src/**/*.py") if quoted.search(p.read_text())]
    assert shipped == []


def test_a_campaign_on_a_scheduler_registered_by_the_test_runs_and_passes_its_audit(tmp_path, monkeypatch, capsys):
    register(monkeypatch)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.setenv("SCRIPTED_WORKER_PLAN", str(write_plan(tmp_path, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05)))
    profile = tmp_path / "plain.yaml"
    fields = {"scheduler": NAME, "python": sys.executable, "mem": "", "time_limit_minutes": 2, "watchdog_minutes": 1}
    profile.write_text(yaml.safe_dump(fields))
    out = tmp_path / "camp"
    assert sweep([*map(str, scripted_run(out, 512, profile=profile, poll_max=1))]) == 0
    assert f"[sweep] preflight: does not apply to {PlainScheduler.title}" in capsys.readouterr().err
    assert sweep(["collect", "--output", str(out)]) == 0

    receipts = sorted(out.glob("curves/*/b*/attempt-*/receipt.json"))
    assert len(receipts) == 3  # batches 1, 2 and the OOM at 4
    for path in receipts:
        receipt = json.loads(path.read_text())
        assert receipt["scheduler"] == NAME
        assert (path.parent / PlainScheduler.job_log(receipt["job_id"])).is_file()
    assert not list(out.glob("curves/**/local-*.out")) and not list(out.glob("curves/**/slurm-*.out"))

    checks = run_audit(out, settle_seconds=0, allow_test_worker=True).report.checks
    assert [c.message for c in checks if c.status == "fail"] == []
    accounted = [c for c in checks if c.name == "plain.accounted"]
    assert len(accounted) == 3 and all(c.status == "pass" for c in accounted)


def test_its_registry_lines_are_all_it_needs(monkeypatch):
    with pytest.raises(UnknownScheduler):
        BACKENDS.get(NAME)
    register(monkeypatch)
    BACKENDS.check()
    READERS.check()
    assert backend(NAME) is PlainScheduler and READERS.get(NAME) is read_plain


def test_a_profile_must_be_chosen_where_its_backend_detects_it(tmp_path, monkeypatch):
    register(monkeypatch)
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: Slurm's backend finds nothing
    assert choose_profile(None, ROOT).name == "local"
    monkeypatch.setattr(PlainScheduler, "detect", staticmethod(lambda: "plain processes (here)"))
    with pytest.raises(CampaignError) as err:
        choose_profile(None, ROOT)
    assert str(err.value).startswith("plain processes (here) was found, but no cluster profile was chosen")


def test_its_own_words_reach_the_user(tmp_path, monkeypatch, capsys):
    register(monkeypatch)
    profile = tmp_path / "plain.yaml"
    profile.write_text(yaml.safe_dump({"scheduler": NAME, "python": sys.executable, "extra_submit_args": ["-x"]}))
    monkeypatch.chdir(ROOT)
    assert sweep(["run", "--output", str(tmp_path / "c"), "--profile", str(profile), "--models", "20m"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("extra_submit_args -x: plain processes take none; remove them")
    assert not (tmp_path / "c").exists()
