"""The watcher's waits: those a profile sets (never_start_seconds, accounting_grace_seconds) and
the poll cap the environment may set (flags.POLL_MAX_ENV), as a run and its resume read them."""

from __future__ import annotations

import sys

import pytest
import yaml

from campaign_helpers import scripted_run, sweep, write_plan
from throughput_sweep.campaign import open_campaign
from throughput_sweep.cli import watch_options
from throughput_sweep.flags import POLL_MAX_ENV, build_parser
from throughput_sweep.watcher_state import WatchOptions


def _run_args(*extra: str):
    return build_parser().parse_args(["run", "--output", "camp", *extra])


@pytest.mark.slow  # a whole campaign on the local scheduler
def test_a_profiles_waits_are_the_watchers_on_resume_too(tmp_path):
    prof = tmp_path / "quick.yaml"
    raw = {"name": "quick", "scheduler": "local", "python": sys.executable, "mem": ""}
    prof.write_text(yaml.safe_dump({**raw, "never_start_seconds": 3, "accounting_grace_seconds": 4}))
    out = tmp_path / "camp"
    made = sweep(*scripted_run(out, 512, max_batch=1, profile=prof), plan=write_plan(tmp_path, {}, ok_seconds=0.05))
    assert made.returncode == 0, made.stderr
    prof.unlink()  # a resume reads the campaign's own copy of the profile
    options = watch_options(open_campaign(out), _run_args("--resume"))
    assert (options.never_start_after, options.accounting_grace) == (3, 4)
    # A profile that names neither waits as the watcher always has.
    assert (WatchOptions().never_start_after, WatchOptions().accounting_grace) == (20, 30)


def test_the_poll_cap_comes_from_the_environment_unless_the_flag_gives_it(monkeypatch):
    monkeypatch.delenv(POLL_MAX_ENV, raising=False)
    assert _run_args().poll_max_seconds is None  # the scheduler's own
    monkeypatch.setenv(POLL_MAX_ENV, "1.5")
    assert _run_args().poll_max_seconds == 1.5
    assert _run_args("--poll-max-seconds", "3").poll_max_seconds == 3


def test_a_bad_poll_cap_in_the_environment_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setenv(POLL_MAX_ENV, "soon")
    with pytest.raises(SystemExit) as stopped:
        _run_args()
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'soon' is not a number" in err[0], err
