"""The sweep runs jobs only on a scheduler listed in the schema with a backend here."""

from __future__ import annotations

import msgspec
import pytest

from throughput_schema import scheduler_names
from throughput_schema.scheduler_names import UnknownScheduler
from throughput_sweep import cli
from throughput_sweep.profiles import embedded_local_profile
from throughput_sweep.schedulers import BACKENDS, make_scheduler


@pytest.fixture
def pbs_without_backend(monkeypatch):
    """A scheduler name listed in the schema with no backend in the sweep."""
    monkeypatch.setattr(scheduler_names, "SCHEDULER_NAMES", (*scheduler_names.SCHEDULER_NAMES, "pbs"))


def _run(tmp_path, scheduler: str) -> int:
    profile = tmp_path / "cluster.yaml"
    profile.write_text(f"scheduler: {scheduler}\n")
    return cli.main(["run", "--output", str(tmp_path / "c"), "--profile", str(profile), "--dry-run"])


def test_every_scheduler_has_a_backend():
    BACKENDS.check()


def test_an_unlisted_scheduler_in_a_profile_is_refused_in_one_line(tmp_path, capsys):
    assert _run(tmp_path, "pbs") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scheduler 'pbs' is not one of: slurm, local" in err
    assert not (tmp_path / "c").exists()


def test_a_listed_scheduler_without_a_backend_is_refused_before_anything_runs(tmp_path, pbs_without_backend, capsys):
    assert _run(tmp_path, "local") == 2
    assert capsys.readouterr().err == "throughput-sweep: scheduler 'pbs' has no backend in the sweep\n"
    assert not (tmp_path / "c").exists()


def test_a_profile_on_a_scheduler_without_a_backend_never_falls_back_to_local(tmp_path, pbs_without_backend):
    on_pbs = msgspec.structs.replace(embedded_local_profile(), scheduler="pbs")
    with pytest.raises(UnknownScheduler, match="scheduler 'pbs' has no backend in the sweep"):
        make_scheduler(on_pbs, tmp_path)
