"""extra_submit_args that a campaign cannot follow are refused when the profile is loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from throughput_sweep.campaign import CampaignError
from throughput_sweep.profiles import load_profile
from throughput_sweep.schedulers.slurm.submit import forbidden_sbatch_args

ROOT = Path(__file__).resolve().parents[3]


def _load(tmp_path: Path, args: list[str], scheduler: str = "slurm", field: str = "extra_submit_args"):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "scheduler": scheduler, "python": sys.executable, field: args}))
    return path, lambda: load_profile(str(path), ROOT)


@pytest.mark.parametrize(
    "args, bad",
    [
        (["-M", "other"], ["-M"]),
        (["-Mother"], ["-Mother"]),
        (["--clusters=other"], ["--clusters=other"]),
        (["--clusters", "other"], ["--clusters"]),
        (["--cluster=other"], ["--cluster=other"]),  # getopt takes an unambiguous prefix
        (["-a", "1-3"], ["-a"]),
        (["-a1-3"], ["-a1-3"]),
        (["-Ha1-3"], ["-Ha1-3"]),  # -H takes no argument, so -a follows in the same word
        (["--array=1-3"], ["--array=1-3"]),
        (["--requeue"], ["--requeue"]),
        (["--constraint=h100", "--requeue", "-M", "x", "--array=0-1"], ["--requeue", "-M", "--array=0-1"]),
    ],
)
def test_each_spelling_is_refused_in_one_line_naming_it(tmp_path, args, bad):
    assert forbidden_sbatch_args(args) == bad
    path, load = _load(tmp_path, args)
    with pytest.raises(CampaignError) as err:
        load()
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: extra_submit_args {' '.join(bad)}: ")
    assert "--clusters/-M, --array/-a and --requeue are not allowed" in line and line.endswith("remove them")


@pytest.mark.parametrize(
    "args",
    [
        ["--constraint=h100"],
        ["--qos=high", "-C", "a100"],
        ["--account=x"],
        ["-pgpu"],
        ["--mail-type=END"],
        ["-J", "name"],
        ["--comment=-M"],
        ["-Cmars"],
        ["--exclusive"],
        ["--reservation=r"],
    ],
)
def test_other_options_are_kept(tmp_path, args):
    assert forbidden_sbatch_args(args) == []
    _, load = _load(tmp_path, args)
    assert load().extra_submit_args == args


@pytest.mark.parametrize(
    "scheduler, field, says",
    [
        ("local", "extra_submit_args", "extra_submit_args -x: the local scheduler takes none; remove them"),
        ("slurm", "extra_sbatch_args", "extra_sbatch_args"),  # the field's old name is a typo, named
    ],
)
def test_a_refused_field_is_one_line_naming_it(tmp_path, scheduler, field, says):
    path, load = _load(tmp_path, ["-x"], scheduler, field)
    with pytest.raises(CampaignError) as err:
        load()
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and says in line
