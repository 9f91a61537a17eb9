"""Pure parts of the Slurm backend: argv, output parsing, error classification."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_schema import ClusterProfile
from throughput_slurm.sacct import AccountingRow
from throughput_sweep.schedulers.slurm.backend import sbatch_argv
from throughput_sweep.schedulers.slurm.text import (
    accounting_is_final,
    classify_sbatch_error,
    launch_failure_note,
    normalize_state,
    parse_squeue,
    sbatch_job_id,
)

PROFILE = ClusterProfile(
    name="gh200", scheduler="slurm", account="throughput", partition="gpu", extra_submit_args=["--constraint=gh200"]
)


def test_sbatch_argv_is_a_list_with_every_resource():
    argv = sbatch_argv(PROFILE, Path("/c/a b/job.sh"), token="tok", workdir=Path("/c/a b"))
    assert argv == [
        "sbatch",
        "--parsable",
        "--no-requeue",
        "--job-name=tok",
        "--comment=tok",
        "--account=throughput",
        "--partition=gpu",
        "--gpus=1",
        "--cpus-per-task=8",
        "--mem=64G",
        "--time=14",
        "--output=/c/a b/slurm-%j.out",
        "--chdir=/c/a b",
        "--constraint=gh200",
        "/c/a b/job.sh",
    ]


def test_sbatch_argv_leaves_out_empty_values():
    profile = ClusterProfile(name="x", scheduler="slurm", mem="")
    argv = sbatch_argv(profile, Path("/j.sh"), token="t", workdir=Path("/w"))
    assert not any(a.startswith(("--account", "--partition", "--mem")) for a in argv)


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified",
        "sbatch: error: Batch job submission failed: Job has invalid qos",
        "sbatch: error: Batch job submission failed: Invalid qos specification",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
        "sbatch: error: Invalid generic resource (gres) specification",
        "sbatch: error: Memory specification can not be satisfied",
        "sbatch: error: Invalid --time specification",
        "sbatch: error: Unable to open file /no/such/job.sh",
        "sbatch: unrecognized option '--bogus'",
        "something nobody has seen before",
    ],
)
def test_permanent_sbatch_errors(stderr):
    assert classify_sbatch_error(stderr, 1) is True


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
        "sbatch: error: Batch job submission failed: Slurm controller is busy, try again later",
        "sbatch: error: slurm_persist_conn_open_without_init: failed to open persistent connection",
        "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
    ],
)
def test_transient_sbatch_errors(stderr):
    assert classify_sbatch_error(stderr, 1) is False


def test_sbatch_that_did_not_finish_is_transient():
    assert classify_sbatch_error("", None) is False


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("80\n", "80"),
        ("80;cluster\n", "80"),
        ("NOTICE: welcome\n80\n", "80"),
        ("80\nNOTICE: this cluster charges GPU-hours\n", "80"),
        ("NOTICE: welcome\n  80  \nNOTICE: this cluster charges GPU-hours\n", "80"),
        ("80;gpu-east\nNOTICE: this cluster charges GPU-hours\n", "80"),
        # no line is a job id, or more than one is: only the token can tell
        ("Submitted batch job 80\n", None),
        ("2026\n80\n", None),
        ("", None),
        ("80;\n", None),
    ],
)
def test_the_job_id_is_the_one_line_that_is_an_id(stdout, job_id):
    assert sbatch_job_id(stdout) == job_id


def test_normalize_state():
    assert normalize_state("CANCELLED by 0") == "CANCELLED"
    assert normalize_state("") == "UNKNOWN"
    assert normalize_state("RUNNING") == "RUNNING"


def test_squeue_parsing_keeps_odd_names_whole():
    text = "101|RUNNING|None|tok-a\n102|PENDING|Resources|name|with|bars\n\n103|COMPLETED|None|tok-c\n"
    rows = parse_squeue(text)
    assert rows["101"].state == "RUNNING" and rows["102"].reason == "Resources"
    assert rows["102"].name == "name|with|bars" and rows["103"].state == "COMPLETED"


def test_accounting_final_needs_the_late_fields():
    full = AccountingRow(
        job_id="7",
        job_name="tok",
        state="COMPLETED",
        exit_code="0:0",
        partition="gpu",
        account="throughput",
        timelimit="00:14:00",
        alloc_tres="cpu=8,gres/gpu=1",
        start="s",
        end="e",
        elapsed="00:00:02",
    )
    assert accounting_is_final(full)
    import msgspec

    for change in (
        {"job_name": "allocation"},
        {"partition": ""},
        {"timelimit": ""},
        {"alloc_tres": ""},
        {"state": "RUNNING"},
        {"end": "Unknown"},
    ):
        assert not accounting_is_final(msgspec.structs.replace(full, **change)), change


# `scontrol show job -o` (abridged) of a job that reached a node and failed, its output folder gone.
STARTED_2205 = (
    "JobId=14 JobState=FAILED Reason=NonZeroExitCode StartTime=2026-12-01T20:31:10 "
    "NodeList=node1 BatchHost=node1 StdOut=/gone/slurm-14.out"
)


def test_a_job_that_reached_a_node_without_a_log_names_the_folder():
    note = launch_failure_note(STARTED_2205)
    assert "/gone/slurm-14.out, which the node could not create" in note
