"""The sweep and the audit read Slurm's terminal states from one table: for every state, the
result the sweep derives for a job that ended so without one passes the audit's state check."""

from __future__ import annotations

import pytest

from throughput_audit import job_states
from throughput_schema import outcome_kind
from throughput_slurm.sacct import ENDED_AS, AccountingRow, job_accounting
from throughput_sweep.schedulers.slurm.states import STATES, TERMINAL_STATES
from throughput_sweep.schedulers.slurm.text import job_status
from throughput_sweep.submission import outcome_of


def outcome_from_row(row: AccountingRow):
    """What the sweep derives for a job that ended as `row` says, read by the Slurm backend."""
    return outcome_of(job_status(row.job_id, row.state, row=row, final=True), 60.0)


def test_the_sweeps_terminal_states_are_the_tables():
    assert set(ENDED_AS) == TERMINAL_STATES
    assert {"PREEMPTED", "DEADLINE", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "REVOKED"} <= TERMINAL_STATES


@pytest.mark.parametrize("state", sorted(set(STATES) - {"COMPLETED"}))
def test_the_outcome_the_sweep_derives_passes_the_audits_state_check(state):
    # A batch script that fails exits non-zero; a job ended from outside has a signal.
    code = "1:0" if state == "FAILED" else "0:15"
    row = AccountingRow(job_id="1", state=f"{state} by 1000" if state == "CANCELLED" else state, exit_code=code)
    kind = outcome_kind(outcome_from_row(row))
    assert kind == STATES[state].outcome
    acc = job_accounting(row)
    assert job_states.state_explains(kind, acc, ""), (state, kind, job_states.expected_text(kind))


def test_a_completed_job_without_a_result_is_not_explained():
    # The sweep calls it crashed (the worker exited 0 without a result); the audit flags it.
    row = AccountingRow(job_id="1", state="COMPLETED", exit_code="0:0")
    kind = outcome_kind(outcome_from_row(row))
    assert kind == "crashed" and not job_states.state_explains(kind, job_accounting(row), "")


@pytest.mark.parametrize(
    "state, code, explained", [("CANCELLED by 1000", "0:15", True), ("FAILED", "11:0", True), ("FAILED", "1:0", False)]
)
def test_a_refused_point_is_a_job_the_watcher_cancelled_or_one_its_worker_refused(state, code, explained):
    # A reason that never clears (the watcher cancels the job), or a node that cannot run the
    # precision (the worker exits with refused's code, 11, and Slurm says FAILED).
    acc = job_accounting(AccountingRow(job_id="1", state=state, exit_code=code))
    assert job_states.state_explains("refused", acc, "") is explained
