"""The interface's own words: what each backend's text becomes, and what a backend answers by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_schema import ClusterProfile
from throughput_schema.scheduler_names import SCHEDULER_NAMES
from throughput_slurm.sacct import AccountingRow, job_accounting, raw_row
from throughput_sweep.schedulers import backend
from throughput_sweep.schedulers.base import ENDED, OUTCOME_OF_STATE
from throughput_sweep.schedulers.slurm.reasons import BUDGET_FIX
from throughput_sweep.schedulers.slurm.states import STATES
from throughput_sweep.schedulers.slurm.submit import sbatch_argv
from throughput_sweep.schedulers.slurm.text import ENDED_AS, job_status, pending


def test_every_terminal_slurm_state_has_a_word_with_the_outcome_slurm_states_gives():
    assert set(ENDED_AS) == set(STATES)
    for state, meaning in STATES.items():
        assert ENDED_AS[state] in ENDED
        assert OUTCOME_OF_STATE[ENDED_AS[state]] == meaning.outcome, state
    assert set(OUTCOME_OF_STATE) == ENDED


def test_slurm_text_becomes_the_interfaces_words():
    row = AccountingRow(job_id="7", state="CANCELLED by 0", exit_code="0:15", elapsed="00:01:30", timelimit="00:14:00")
    status = job_status("7", "CANCELLED", row=row, final=True)
    assert (status.state, status.word, status.finished, status.accounting_final) == (
        "cancelled",
        "CANCELLED",
        True,
        True,
    )
    assert status.accounting is not None and status.accounting == job_accounting(row)
    assert status.accounting.state == "cancelled" and raw_row(status.accounting.raw) == row
    running = job_status("8", "RUNNING")
    assert running.state == "running" and running.pending is None and not running.finished
    assert job_status("9", "UNKNOWN").state == "unknown"


def test_pending_reasons_are_classified_wait_or_never_start():
    assert not pending("Priority").never_starts and pending("Priority").text == "Priority"
    assert pending("None").text == ""
    never = pending("PartitionTimeLimit")
    assert never.never_starts and "time_limit_minutes" in never.fix and not never.budget
    used_up = pending("AssocGrpGRESMinutes")
    assert used_up.never_starts and used_up.budget and used_up.fix == BUDGET_FIX
    wait = pending("AssocGrpGRESRunMinutes")
    assert wait.budget and not wait.never_starts and not wait.fix
    status = job_status("1", "PENDING", reason="QOSMaxJobsPerUserLimit")
    assert status.state == "pending" and status.pending == pending("QOSMaxJobsPerUserLimit")


def test_a_sacct_row_reads_in_seconds_gpus_and_exit_code():
    """sacct's strings become the project's record, the row itself kept as its raw text."""
    tres = "billing=8,cpu=8,gres/gpu=2,mem=64G"
    row = AccountingRow(job_id="3", exit_code="8:0", elapsed="1-02:03:04", timelimit="UNLIMITED", alloc_tres=tres)
    acc = job_accounting(row)
    assert acc.elapsed_seconds == 93784 and acc.time_limit_seconds is None
    assert (acc.allocation.gpus, acc.allocation.cpus, acc.allocation.memory_bytes) == (2, 8, 64 << 30)
    assert (acc.exit_code, acc.signal) == (8, 0)
    assert raw_row(acc.raw) == row
    blank = job_accounting(AccountingRow(job_id="4", elapsed="soon", timelimit="x"))
    assert (blank.elapsed_seconds, blank.time_limit_seconds, blank.allocation.gpus, blank.exit_code) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_every_backend_answers_what_the_campaign_asks(name):
    cls = backend(name)
    assert cls.name == name
    assert cls.accounting_source and cls.poll_max_seconds > 0
    assert isinstance(cls.environment_removed(), dict)
    assert cls.read_pending("Priority").text == "Priority" and not cls.read_pending("Priority").never_starts
    profile = ClusterProfile(name="p", scheduler=name)
    argv = cls.submit_command(profile, Path("/c/job.sh"), token="TOKEN", workdir=Path("/c"))
    assert cls.title and cls.job_log("7").endswith("-7.out") and cls.submit_args_problem([]) == ""
    assert cls.refusal_fields("some words of no scheduler") == ""
    if name == "slurm":
        assert argv == sbatch_argv(profile, Path("/c/job.sh"), token="TOKEN", workdir=Path("/c"))
        assert f"--output=/c/{cls.job_log('%j')}" in argv and cls.remote_nodes
        assert cls.read_pending("AssocGrpGRESMinutes") == pending("AssocGrpGRESMinutes")
        assert cls.refusal_fields("sbatch: error: Invalid account or account/partition combination specified")
    else:
        assert argv is None and not cls.remote_nodes and cls.detect() == ""
        assert cls.early_end(Path("/nonexistent"), "") == ""
        assert "does not apply" in cls.preflight(None, [], dry_run=False)  # type: ignore[arg-type]


def test_each_backend_names_its_own_job_logs():
    assert backend("slurm").job_log("12") == "slurm-12.out"
    assert backend("local").job_log("12") == "local-12.out"
