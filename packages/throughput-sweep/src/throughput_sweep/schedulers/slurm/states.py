"""Slurm's terminal job states: which outcome each implies, and what it means to a user.

The sweep derives a result from the state of a job that wrote none (its Slurm backend names
each state in the scheduler interface's words, `throughput_slurm.sacct.ENDED_AS`, whose
outcomes its tests hold to this table); the audit judges a result's outcome against those
same words (`throughput_audit.job_states`), and says here what a state meant. So a state
the sweep accepts (PREEMPTED, DEADLINE, REVOKED...) is never one the audit rejects.
"""

from __future__ import annotations

from typing import NamedTuple


class StateMeaning(NamedTuple):
    outcome: str  # the outcome kind of a job that ended so without writing a result
    meaning: str  # for messages: what happened to the job
    by_someone_else: bool = False  # ended from outside the job: retry, never a boundary


# Every state sacct reports once a job can no longer run (sacct(1), JOB STATE CODES).
STATES: dict[str, StateMeaning] = {
    "COMPLETED": StateMeaning("crashed", "its batch script exited 0"),
    "FAILED": StateMeaning("crashed", "its batch script exited non-zero"),
    "TIMEOUT": StateMeaning("timeout", "reached its time limit"),
    "DEADLINE": StateMeaning("timeout", "reached its --deadline"),
    "OUT_OF_MEMORY": StateMeaning("host_oom", "exceeded its memory allocation"),
    "CANCELLED": StateMeaning("cancelled", "was cancelled (scancel by a user or an administrator)", True),
    "PREEMPTED": StateMeaning("cancelled", "was preempted by a higher-priority job", True),
    "REVOKED": StateMeaning("cancelled", "was revoked (a federated sibling ran it on another cluster)", True),
    "NODE_FAIL": StateMeaning("node_fail", "lost its node"),
    "BOOT_FAIL": StateMeaning("node_fail", "could not boot its node"),
}

TERMINAL_STATES = frozenset(STATES)


def state_word(state: str) -> str:
    """'CANCELLED by 1000' -> 'CANCELLED'; '' -> ''."""
    return state.split()[0] if state and state.split() else ""


def meaning(state: str) -> StateMeaning | None:
    return STATES.get(state_word(state))


def by_someone_else(state: str) -> bool:
    m = meaning(state)
    return bool(m and m.by_someone_else)
