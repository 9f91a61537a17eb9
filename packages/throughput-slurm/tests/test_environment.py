"""The environment of every Slurm command: the shell's, less SBATCH_*/SLURM_* and the query
commands' option variables, with SLURM_TIME_FORMAT=standard."""

import time
from datetime import datetime, timedelta, timezone

from throughput_schema.time_zones import fixed_zone, utc_offset_text
from throughput_slurm.environment import query_environment, slurm_environment, slurm_instant, slurm_time


def test_job_changing_and_allocation_variables_are_removed_and_reported():
    env, removed = slurm_environment(
        {
            "HOME": "/home/u",
            "PATH": "/usr/bin",
            "SLURM_CONF": "/etc/slurm/x.conf",
            "SBATCH_TIMELIMIT": "00:01:00",
            "SBATCH_EXCLUSIVE": "1",
            "SBATCH_WAIT": "1",
            "SLURM_JOB_ID": "7",
            "SLURM_CPUS_ON_NODE": "2",
            "SLURM_CLUSTERS": "other",
            "SLURM_TIME_FORMAT": "relative",
            "SQUEUE_FORMAT": "%i",
            "SACCT_FEDERATION": "1",
            "SCANCEL_INTERACTIVE": "1",
            "SLURMD_NODENAME": "n1",
        }
    )
    assert env == {
        "HOME": "/home/u",
        "PATH": "/usr/bin",
        "SLURM_CONF": "/etc/slurm/x.conf",
        "SLURMD_NODENAME": "n1",
        "SLURM_TIME_FORMAT": "standard",
    }
    assert list(removed) == sorted(removed)
    assert removed == {
        "SACCT_FEDERATION": "1",
        "SBATCH_EXCLUSIVE": "1",
        "SBATCH_TIMELIMIT": "00:01:00",
        "SBATCH_WAIT": "1",
        "SCANCEL_INTERACTIVE": "1",
        "SLURM_CLUSTERS": "other",
        "SLURM_CPUS_ON_NODE": "2",
        "SLURM_JOB_ID": "7",
        "SLURM_TIME_FORMAT": "relative",
        "SQUEUE_FORMAT": "%i",
    }


def test_a_clean_shell_loses_nothing():
    env, removed = slurm_environment({"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "standard"})
    assert env == {"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "standard"} and removed == {}


def test_the_users_jwt_token_is_kept_and_never_recorded():
    env, removed = slurm_environment({"SLURM_JWT": "secret", "SBATCH_QOS": "nosuch"})
    assert env["SLURM_JWT"] == "secret" and removed == {"SBATCH_QOS": "nosuch"}


def test_queries_run_in_utc_and_sbatch_keeps_the_shells_zone():
    shell = {"PATH": "/usr/bin", "TZ": "Asia/Kolkata", "SLURM_TIME_FORMAT": "relative"}
    assert query_environment(shell) == {"PATH": "/usr/bin", "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    # sbatch's environment is also the job's: its zone is the user's.
    assert slurm_environment(shell)[0]["TZ"] == "Asia/Kolkata"


def test_times_to_and_from_slurm_are_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        when = datetime(2026, 12, 3, 11, 59, 2, tzinfo=timezone(timedelta(hours=5, minutes=30)))
        assert slurm_time(when) == "2026-12-03T06:29:02"
        assert slurm_time(when.astimezone().replace(tzinfo=None)) == "2026-12-03T06:29:02"  # naive: local
    finally:
        monkeypatch.undo()
        time.tzset()
    assert slurm_instant("2026-12-03T06:29:02") == "2026-12-03T06:29:02+00:00"
    assert [slurm_instant(t) for t in ("Unknown", "None", "", "19:19:41")] == ["Unknown", "None", "", "19:19:41"]


def test_a_fixed_zone_is_what_tz_reads_as_that_offset():
    assert fixed_zone(timedelta(hours=5, minutes=30)) == "<+0530>-05:30"
    assert fixed_zone(timedelta(hours=-8)) == "<-0800>+08:00"
    assert utc_offset_text(timedelta(hours=-3, minutes=-30)) == "UTC-03:30"
