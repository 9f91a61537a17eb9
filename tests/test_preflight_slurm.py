"""The preflight of `run` against the real local Slurm: a job that could never run is refused
before the campaign exists (one line per problem, naming the profile field and the cluster's
limit, exit 2, nothing on disk), with --dry-run too; a limit that only slows it is a note.
The cluster's restrictions are tools/local-slurm.sh's: partition `short` (MaxTime=5), account
`limited` (QOS submit2, MaxSubmitJobsPerUser=2), account `throttled` (QOS run2, MaxJobsPerUser=2)."""

from __future__ import annotations

import pytest

from campaign_helpers import profile, sweep

pytestmark = pytest.mark.slurm

PREFIX = "throughput-sweep: "


def _run(tmp_path, prof, *extra):
    out = tmp_path / "camp"
    r = sweep(
        "run",
        "--output",
        out,
        "--profile",
        prof,
        "--models",
        "20m",
        "--contexts",
        "512",
        "--max-batch",
        "2",
        "--worker",
        "scripted_worker",
        "--no-progress",
        *extra,
        timeout=120,
    )
    return out, r


def _problems(stderr: str) -> list[str]:
    return [line[len(PREFIX) :] for line in stderr.splitlines() if line.startswith(PREFIX)]


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_account_and_a_partition_that_do_not_exist_are_refused_one_line_each(local_slurm, tmp_path, dry_run):
    prof = profile(tmp_path, account="nosuchaccount", partition="nosuchpartition")
    out, r = _run(tmp_path, prof, *(["--dry-run"] if dry_run else []))
    assert r.returncode == 2, r.stderr
    problems = _problems(r.stderr)
    assert len(problems) == 2, r.stderr
    assert problems[0].startswith("profile partition=nosuchpartition: no such partition on this cluster (partitions: ")
    assert "gpu" in problems[0] and problems[0].endswith("set partition to one of them")
    assert problems[1].startswith("profile account=nosuchaccount: user ")
    assert "throughput" in problems[1] and problems[1].endswith("set account to one of them")
    assert "Traceback" not in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [prof]


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_time_limit_above_the_partitions_max_time_is_refused(local_slurm, tmp_path, dry_run):
    # sbatch --test-only accepts this job: it would pend forever with reason PartitionTimeLimit.
    prof = profile(tmp_path, partition="short", time_limit_minutes=14, watchdog_minutes=13)
    out, r = _run(tmp_path, prof, *(["--dry-run"] if dry_run else []))
    assert r.returncode == 2, r.stderr
    assert _problems(r.stderr) == [
        "profile time_limit_minutes=14 exceeds partition short's MaxTime of 5 minutes: "
        "lower it (and watchdog_minutes) or choose another partition"
    ]
    assert not out.exists()


def test_within_the_partitions_max_time_the_preflight_passes_and_says_what_it_checked(local_slurm, tmp_path):
    prof = profile(tmp_path, partition="short", time_limit_minutes=5, watchdog_minutes=4)
    out, r = _run(tmp_path, prof, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert (
        "[sweep] preflight passed: partition short (MaxTime 5 minutes); 16 GPUs on its largest node; "
        "account throughput, QOS normal; sbatch --test-only accepted the first job"
    ) in r.stderr
    # --max-batch 2: batches 1 and 2 of one curve, each running to its 5 minutes on 1 GPU.
    assert "worst case: at most 2 job(s) of up to 5 min on 1 GPU(s): 0.2 GPU-hours" in r.stdout
    assert not out.exists()


@pytest.mark.parametrize(
    "account, note",
    [
        (
            "limited",
            "QOS submit2 has MaxSubmitJobsPerUser=2, below the profile's max_concurrent_jobs=12: "
            "the watcher keeps at most 2 jobs submitted at a time",
        ),
        (
            "throttled",
            "QOS run2 has MaxJobsPerUser=2, below the profile's max_concurrent_jobs=12: "
            "at most 2 of its jobs run at once and the others wait in the queue",
        ),
    ],
)
def test_a_submit_or_run_limit_below_the_cap_is_a_note_not_a_refusal(local_slurm, tmp_path, account, note):
    out, r = _run(tmp_path, profile(tmp_path, account=account), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"[sweep] note: {note}" in r.stderr
    assert not _problems(r.stderr)


def test_more_gpus_than_a_node_has_are_refused_naming_gpus_per_job(local_slurm, tmp_path):
    out, r = _run(tmp_path, profile(tmp_path, gpus_per_job=17), "--dry-run")
    assert r.returncode == 2, r.stderr
    assert _problems(r.stderr) == [
        "profile gpus_per_job=17: no node of partition gpu has that many GPUs (at most 16 on a node): "
        "lower it or choose a GPU partition"
    ]


def test_the_local_scheduler_says_the_preflight_does_not_apply(tmp_path):
    out, r = _run(tmp_path, "local", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "[sweep] preflight: does not apply to the local scheduler" in r.stderr
