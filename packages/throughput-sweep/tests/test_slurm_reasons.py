"""The explicit lists of sbatch refusals and pending reasons (`schedulers.slurm.reasons`), on Slurm's own text.

The refusals in `RECORDED` were recorded from the project's Slurm 22.05.8 and 24.11.5 by
tools/record-slurm-text.sh (the same text on both: account `limited` with QOS submit2
MaxSubmitJobsPerUser=2, partition `short` with MaxTime=5, an unknown QOS, partition, account,
feature, too many GPUs or too much memory); the others are Slurm's slurm_errno.c strings of
22.05.8 and 24.11.5, as sbatch prints them ("sbatch: error: Batch job submission failed: %m").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_sweep.schedulers.slurm.reasons import (
    LIMIT_MESSAGES,
    NEVER_STARTS,
    NEVER_STARTS_FIELDS,
    PERMANENT_MESSAGES,
    TRANSIENT_MESSAGES,
    WAITS,
    may_hide_a_job,
    never_starts,
    pending_fix,
    profile_fields,
    refusal_kind,
    refusal_text,
)

FAILED = "sbatch: error: Batch job submission failed: "
POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"

# The recordings (throughput-sweep's parser fixtures; commands.txt there says each command).
RECORDINGS = Path(__file__).resolve().parent / "data"
VERSIONS = ("22.05", "24.11")
# Each recorded refusal (sbatch's stderr; `test-only`: sbatch --test-only) with its kind and
# the profile fields it points at.
RECORDED = {
    "sbatch-submit-limit.txt": ("limit", ""),  # the third sbatch on account `limited`
    "sbatch-invalid-qos.txt": ("permanent", "account (its QOS) or a --qos in extra_submit_args"),
    "sbatch-invalid-partition.txt": ("permanent", "partition"),
    "sbatch-invalid-account.txt": ("permanent", "account, partition"),
    "sbatch-invalid-feature.txt": ("permanent", ""),
    "sbatch-too-many-gpus.txt": ("permanent", "gpus_per_job, cpus_per_task, mem"),
    "sbatch-too-much-memory.txt": ("permanent", "gpus_per_job, cpus_per_task, mem"),
    "sbatch-test-only-partition.txt": ("permanent", "partition"),
    "sbatch-test-only-account.txt": ("permanent", "account, partition"),
}


def recorded(version: str, name: str) -> str:
    return (RECORDINGS / f"slurm-{version}" / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", RECORDED)
def test_recorded_refusals_have_their_kind_and_name_the_profile_fields_they_come_from(version, name):
    stderr = recorded(version, name)
    kind, fields = RECORDED[name]
    assert refusal_kind(stderr, 1) == kind and profile_fields(stderr) == fields
    assert not may_hide_a_job(stderr, 1)
    assert "\n" not in refusal_text(stderr)


def test_the_refusals_read_the_same_on_both_versions():
    assert all(len({recorded(v, name) for v in VERSIONS}) == 1 for name in RECORDED)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_recorded_pending_reason_of_a_job_over_the_partitions_time_limit_never_clears(version):
    reason = recorded(version, "squeue-pending.txt").split("|")[2]
    assert reason == "PartitionTimeLimit" and never_starts(reason)
    assert profile_fields(f"Slurm keeps the job pending for {reason}: {pending_fix(reason)}") == "time_limit_minutes"


@pytest.mark.parametrize(
    "stderr",
    [
        f"sbatch: error: AssocMaxSubmitJobLimit\n{FAILED}{POLICY}",
        f"sbatch: error: QOSGrpSubmitJobsLimit\n{FAILED}{POLICY}",
        f"sbatch: error: AssocGrpSubmitJobsLimit\n{FAILED}{POLICY}",
        f"sbatch: error: MaxSubmitJobsPerAccount\n{FAILED}{POLICY}",
        f"{FAILED}{POLICY}",  # without the reason word: a limit (the preflight catches size and time)
        "sbatch: error: You have reached MaxSubmitJobs on this cluster",  # a site's job_submit message
    ],
)
def test_submit_limits_are_limits(stderr):
    assert refusal_kind(stderr, 1) == "limit"
    assert not may_hide_a_job(stderr, 1)


@pytest.mark.parametrize(
    "word",
    [
        "QOSMaxWallDurationPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "QOSMaxGRESPerJob",
        "QOSMaxCpuPerJobLimit",
        "QOSMinGRES",
        "QOSGrpWallLimit",
    ],
)
def test_the_policy_message_with_a_size_or_time_word_is_permanent(word):
    assert refusal_kind(f"sbatch: error: {word}\n{FAILED}{POLICY}", 1) == "permanent"


@pytest.mark.parametrize("stderr", [f"{FAILED}{m}" for m in PERMANENT_MESSAGES])
def test_permanent_refusals(stderr):
    assert refusal_kind(stderr, 1) == "permanent"


@pytest.mark.parametrize("message", TRANSIENT_MESSAGES)
def test_transient_refusals(message):
    assert refusal_kind(f"{FAILED}{message}", 1) == "transient"


@pytest.mark.parametrize("message", LIMIT_MESSAGES)
def test_every_limit_message_is_a_limit(message):
    assert refusal_kind(f"sbatch: error: {message}", 1) == "limit"


def test_rate_limits_are_waits_that_hide_no_job():
    for text in ("Rate limit exceeded, please retry later", "Rate limit exceeded, please retry momentarily"):
        assert refusal_kind(f"{FAILED}{text}", 1) == "transient"
        assert not may_hide_a_job(f"{FAILED}{text}", 1)


def test_communication_failures_may_hide_a_job():
    assert may_hide_a_job(f"{FAILED}Socket timed out on send/recv operation", 1)
    assert may_hide_a_job("", None)
    assert refusal_kind("", None) == "transient"


def test_an_unknown_message_is_permanent_and_quoted_whole():
    text = "sbatch: error: first line of a site's plugin\nsbatch: error: something nobody has seen before"
    assert refusal_kind(text, 1) == "permanent"
    assert refusal_text(text) == (
        "sbatch: error: first line of a site's plugin / sbatch: error: something nobody has seen before"
    )


@pytest.mark.parametrize("reason", sorted(NEVER_STARTS))
def test_reasons_that_never_clear(reason):
    assert never_starts(reason)
    fix = pending_fix(reason)
    assert "new campaign" in fix and "\n" not in fix


@pytest.mark.parametrize("reason", [*WAITS, "ReqNodeNotAvail, UnavailableNodes:node1", "None", "", "(null)"])
def test_reasons_that_are_waits(reason):
    assert not never_starts(reason)


@pytest.mark.parametrize(
    "stderr, fields",
    [
        (
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
            "account, partition",
        ),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", "partition"),
        ("sbatch: error: Batch job submission failed: Invalid qos specification", "account (its QOS)"),
        (
            "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
            "time_limit_minutes",
        ),
        (
            "sbatch: error: Batch job submission failed: Requested node configuration is not available",
            "gpus_per_job, cpus_per_task, mem",
        ),
        (
            "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's "
            "size and/or time limits)",
            "",
        ),  # a limit: waiting helps, the profile is not the cause
        ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", ""),
    ],
)
def test_refusals_that_come_from_the_profile(stderr, fields):
    assert profile_fields(f"sbatch refused the job: sbatch exit 1: {stderr}").startswith(fields)
    assert bool(profile_fields(stderr)) == bool(fields)


def test_pending_reasons_that_come_from_the_profile_name_its_fields():
    assert set(NEVER_STARTS_FIELDS) <= set(NEVER_STARTS)
    for reason, fields in NEVER_STARTS_FIELDS.items():
        assert profile_fields(f"Slurm keeps the job pending for {reason}: {pending_fix(reason)}") == fields
    assert profile_fields("Slurm keeps the job pending for PartitionNodeLimit") == ""
