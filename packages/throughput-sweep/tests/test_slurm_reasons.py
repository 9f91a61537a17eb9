"""The explicit lists of sbatch refusals and pending reasons (`slurm_reasons`), on Slurm's own text.

Texts marked "22.05 local" were captured from the project's Slurm 22.05.8
(tools/local-slurm.sh: account `limited` with QOS submit2 MaxSubmitJobsPerUser=2,
partition `short` with MaxTime=5); the others are Slurm's slurm_errno.c strings of
22.05.8 and 24.11.5, as sbatch prints them ("sbatch: error: Batch job submission failed: %m").
"""

from __future__ import annotations

import pytest

from throughput_sweep.schedulers.slurm_reasons import (
    LIMIT_MESSAGES,
    NEVER_STARTS,
    PERMANENT_MESSAGES,
    TRANSIENT_MESSAGES,
    WAITS,
    may_hide_a_job,
    never_starts,
    pending_fix,
    refusal_kind,
    refusal_text,
)
from throughput_sweep.schedulers.slurm_text import launch_failure_note

FAILED = "sbatch: error: Batch job submission failed: "
POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"

# 22.05 local: the third sbatch on account `limited` (MaxSubmitJobsPerUser=2).
SUBMIT_LIMIT_2205 = f"sbatch: error: QOSMaxSubmitJobPerUserLimit\n{FAILED}{POLICY}"
# 22.05 local, real sbatch (not --test-only).
INVALID_PARTITION_2205 = f"sbatch: error: invalid partition specified: nosuch\n{FAILED}Invalid partition name specified"
INVALID_ACCOUNT_2205 = f"{FAILED}Invalid account or account/partition combination specified"
INVALID_QOS_2205 = f"{FAILED}Invalid qos specification"
INVALID_FEATURE_2205 = f"{FAILED}Invalid feature specification"
TOO_MANY_GPUS_2205 = f"{FAILED}Requested node configuration is not available"
TOO_MUCH_MEMORY_2205 = (
    f"sbatch: error: Memory specification can not be satisfied\n{FAILED}Requested node configuration is not available"
)
# 22.05 local, sbatch --test-only.
TEST_ONLY_PARTITION_2205 = (
    "sbatch: error: invalid partition specified: nosuch\nallocation failure: Invalid partition name specified"
)
TEST_ONLY_ACCOUNT_2205 = "allocation failure: Invalid account or account/partition combination specified"


@pytest.mark.parametrize(
    "stderr",
    [
        SUBMIT_LIMIT_2205,
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


@pytest.mark.parametrize(
    "stderr",
    [
        INVALID_PARTITION_2205,
        INVALID_ACCOUNT_2205,
        INVALID_QOS_2205,
        INVALID_FEATURE_2205,
        TOO_MANY_GPUS_2205,
        TOO_MUCH_MEMORY_2205,
        TEST_ONLY_PARTITION_2205,
        TEST_ONLY_ACCOUNT_2205,
        *(f"{FAILED}{m}" for m in PERMANENT_MESSAGES),
    ],
)
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


# 22.05 local: `scontrol show job -o` of a job cancelled while it pended on `short` with --time=14.
CANCELLED_PENDING_2205 = (
    "JobId=13 JobName=lp-cap2 JobState=CANCELLED Reason=PartitionTimeLimit Dependency=(null) "
    "SubmitTime=2026-12-01T20:31:08 StartTime=2026-12-01T20:31:10 EndTime=2026-12-01T20:31:10 "
    "Partition=short ReqNodeList=(null) ExcNodeList=(null) NodeList= StdOut=/c/b1/attempt-1/slurm-13.out"
)
STARTED_2205 = (
    "JobId=14 JobState=FAILED Reason=NonZeroExitCode StartTime=2026-12-01T20:31:10 "
    "NodeList=node1 BatchHost=node1 StdOut=/gone/slurm-14.out"
)


def test_a_job_that_never_started_is_not_blamed_on_its_output_folder():
    note = launch_failure_note(CANCELLED_PENDING_2205)
    assert "PartitionTimeLimit" in note and "never reached a node" in note
    assert "could not create" not in note


def test_a_job_that_reached_a_node_without_a_log_names_the_folder():
    note = launch_failure_note(STARTED_2205)
    assert "/gone/slurm-14.out, which the node could not create" in note
