"""Which cluster profile a campaign runs on, and what makes a profile unusable."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from throughput_sweep.campaign import CampaignError
from throughput_sweep.profiles import (
    PROFILE_ENV,
    available_profiles,
    choose_profile,
    embedded_local_profile,
    load_profile,
    profile_problem,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)


def _path_with_sbatch(tmp_path: Path, present: bool) -> str:
    folder = tmp_path / ("with" if present else "without")
    folder.mkdir()
    if present:  # only looked up on PATH, never run
        sbatch = folder / "sbatch"
        sbatch.write_text("#!/bin/sh\nexit 1\n")
        sbatch.chmod(0o755)
    return str(folder)


def test_without_sbatch_the_default_is_local(tmp_path, monkeypatch, no_env):
    monkeypatch.setenv("PATH", _path_with_sbatch(tmp_path, present=False))
    assert choose_profile(None, ROOT).name == "local"


def test_with_sbatch_and_no_choice_it_refuses_in_one_line_naming_both_ways(tmp_path, monkeypatch, no_env):
    monkeypatch.setenv("PATH", _path_with_sbatch(tmp_path, present=True))
    with pytest.raises(CampaignError) as err:
        choose_profile(None, ROOT)
    line = str(err.value)
    assert (
        "\n" not in line
        and line.startswith(f"Slurm ({tmp_path}/")
        and "was found, but no cluster profile was chosen" in line
    )
    assert "gh200, local, local-gpu, local-slurm" in line
    assert "--profile NAME" in line and f"export {PROFILE_ENV}=NAME" in line


def test_precedence_flag_then_parent_then_environment(tmp_path, monkeypatch, no_env):
    monkeypatch.setenv("PATH", _path_with_sbatch(tmp_path, present=True))
    monkeypatch.setenv(PROFILE_ENV, "local-slurm")
    assert choose_profile(None, ROOT).name == "local-slurm"
    assert choose_profile("local", ROOT).name == "local"
    parent = embedded_local_profile()
    assert choose_profile(None, ROOT, inherited=parent) is parent
    assert choose_profile("local-slurm", ROOT, inherited=parent).name == "local-slurm"


def test_an_unknown_profile_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "nosuch")
    with pytest.raises(CampaignError, match=f"^{PROFILE_ENV}=nosuch: --profile nosuch: no such profile"):
        choose_profile(None, ROOT)


def _profile(tmp_path: Path, **fields) -> Path:
    raw = {"name": "t", "scheduler": "slurm", "python": sys.executable, **fields}
    path = tmp_path / "t.yaml"
    path.write_text("\n".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in raw.items()))
    return path


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"time_limit_minutes": 14, "watchdog_minutes": 14}, "watchdog_minutes 14 must be at least one minute below"),
        ({"time_limit_minutes": 14, "watchdog_minutes": 13.5}, "watchdog_minutes 13.5 must be at least one minute"),
        ({"cpus_per_task": 0}, "cpus_per_task"),
        ({"gpus_per_job": -1}, "gpus_per_job"),
        ({"mem": "lots"}, "mem 'lots' is not a positive amount"),
        ({"mem": "0G"}, "mem '0G' is not a positive amount"),
        ({"scheduler": "pbs"}, "scheduler"),
        ({"python": "/no/such/python"}, "python /no/such/python: no such compute Python"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_file_and_the_field(tmp_path, fields, words):
    path = _profile(tmp_path, **fields)
    with pytest.raises(CampaignError) as err:
        load_profile(str(path), ROOT)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and words in line, line


def test_a_dry_run_may_preview_before_the_compute_python_exists(tmp_path):
    path = _profile(tmp_path, python="/no/such/python")
    assert load_profile(str(path), ROOT, need_python=False).python == "/no/such/python"


def test_every_committed_profile_is_valid():
    for path in sorted((ROOT / "configs" / "clusters").glob("*.yaml")):
        profile = load_profile(str(path), ROOT, need_python=False)
        assert profile_problem(profile, need_python=False) == "", path
    good = msgspec.structs.replace(embedded_local_profile(), watchdog_minutes=13.0, time_limit_minutes=14)
    assert profile_problem(good) == ""


def test_local_is_built_in_and_nowhere_else(tmp_path):
    """One `local` profile, the sweep's own: an installed sweep (no configs/ folder) and this
    checkout find, list and run the same one."""
    assert not (ROOT / "configs" / "clusters" / "local.yaml").exists(), "a second local profile"
    assert "local" in available_profiles(tmp_path)
    assert load_profile("local", tmp_path) == load_profile("local", ROOT) == embedded_local_profile()
