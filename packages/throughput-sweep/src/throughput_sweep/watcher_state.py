"""What the watcher's tasks share, and the view of the watcher its helpers are given.

The helpers that settle one kind of ending (budget.py, cluster_limits.py, ended_early.py,
late_results.py) read and note through `WatcherView`: the watcher's campaign, scheduler,
options and state, and its one way of telling the user. They never import the watcher.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from throughput_schema import ClusterProfile
from throughput_sweep.campaign import Campaign
from throughput_sweep.schedulers.base import Pending, Scheduler

# Read only for its defaults.
_PROFILE = ClusterProfile(name="defaults", scheduler="local")


@dataclass
class WatchOptions:
    retry_failed: bool = False
    poll_min: float = 1.0
    poll_max: float = 30.0
    # The profile's (ClusterProfile says why): the watcher without one keeps its defaults.
    accounting_grace: float = _PROFILE.accounting_grace_seconds
    # Failed token lookups tolerated before an unsettled intent becomes ambiguous.
    settle_attempts: int = 5
    # While running, an intent is declared ambiguous only after lookups failed for this long
    # (a slurmctld restart of a few minutes must not block curves).
    settle_patience: float = 600.0
    submit_backoff_max: float = 120.0
    never_start_after: float = _PROFILE.never_start_seconds
    # After the cluster's submit limit lowered the slots, try one more slot this often.
    limit_probe: float = 60.0
    # A job that squeue no longer lists while sacct gives no row (slurmdbd down, accounting
    # disabled) is settled from its attempt folder after this long (`cluster_limits.settle_vanished`).
    accounting_down_grace: float = 300.0
    # ...and, without a result there, only once its time limit has passed since its submission by this much.
    vanished_margin: float = 300.0
    progress: bool = True
    resume_command: str = ""


@dataclass
class WatcherState:
    finished: dict[str, str] = field(default_factory=dict)  # job id -> terminal state
    first_seen_finished: dict[str, float] = field(default_factory=dict)
    first_seen_row: dict[str, float] = field(default_factory=dict)  # job id -> first sacct row
    accounting_given_up: set[str] = field(default_factory=set)
    # Held while submitting, so the poller never settles an intent whose sbatch is in flight.
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    settle_failures: int = 0
    settle_failing_since: float | None = None
    durations: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    wake_poller: anyio.Event = field(default_factory=anyio.Event)
    wake_submitter: anyio.Event = field(default_factory=anyio.Event)
    done: bool = False
    submit_error: str = ""
    interrupted: bool = False
    last_line: str = ""
    pending: dict[str, Pending] = field(default_factory=dict)  # job id -> why it waits
    refused_cancelled: set[str] = field(default_factory=set)  # never-starting jobs cancelled
    vanished_since: dict[str, float] = field(default_factory=dict)  # job id -> first seen gone
    never_since: dict[str, tuple[str, float]] = field(default_factory=dict)  # job id -> (reason, first seen)
    seen_out: set[str] = field(default_factory=set)  # job ids this watcher saw pending or running
    # Lookups of each late intent (its result came before its receipt): the run waits for a few.
    late_lookups: Counter[Path] = field(default_factory=Counter)
    said: set[str] = field(default_factory=set)  # every `say` of this run
    budget: Pending | None = None  # a used-up allocation budget: submit nothing more (budget.py)


class WatcherView(Protocol):
    campaign: Campaign
    scheduler: Scheduler
    options: WatchOptions
    st: WatcherState

    def say(self, message: str) -> None: ...

    def say_new(self, message: str) -> None:
        """`say`, unless this run has said it already."""
        ...
