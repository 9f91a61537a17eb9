"""The watcher's progress line, on stderr: one line, rewritten in place on a terminal.

"[sweep] 3 points done, 1 running, 2 pending (QOSMaxJobsPerUserLimit), 0 curve(s) blocked,
0/2 curves ended, at least 5 point(s) ahead; submit limit: 2 jobs at once (profile 8)"

Pending jobs are those the scheduler says are pending, with its reason (a budget of running
jobs' minutes, Slurm's GrpTRESRunMins, says that it waits for them to end); the submit-limit
note stands while the watcher keeps fewer jobs out than the profile allows because the
cluster refused more.
"""

from __future__ import annotations

import math
import sys
from collections import Counter

from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.curves import Curve
from throughput_sweep.schedulers.base import Pending


def _reason(pending: Pending) -> str:
    if pending.budget and not pending.never_starts:
        return f"{pending.text}: a budget of running jobs' minutes, waiting for running jobs to end"
    return pending.text or "no reason given"


def pending_text(reasons: list[Pending]) -> str:
    """'2 pending (QOSMaxJobsPerUserLimit)', '3 pending (2 Priority, 1 Resources)', '' for none."""
    if not reasons:
        return ""
    counts = Counter(_reason(r) for r in reasons)
    if len(counts) == 1:
        return f"{len(reasons)} pending ({next(iter(counts))})"
    return f"{len(reasons)} pending (" + ", ".join(f"{n} {r}" for r, n in counts.most_common()) + ")"


def progress_line(
    infos: list[AttemptInfo],
    curves: list[Curve],
    *,
    pending: dict[str, Pending],
    durations: list[float],
    slots: int,
    limit_note: str = "",
) -> str:
    """`pending`: job id -> why it waits, for the jobs the scheduler says are pending."""
    done = sum(1 for i in infos if i.status in ("ok", "oom", "failed"))
    # Points without a result yet: a job whose result is in but whose accounting is
    # still awaited is not work ahead of the user.
    out = [i for c in curves for i in c.running]
    waiting = [pending[i.job_id] for i in out if i.job_id in pending]
    running = len(out) - len(waiting)
    blocked = sum(1 for c in curves if c.state == "blocked")
    ended = sum(1 for c in curves if c.done)
    ahead = sum(len(c.next) for c in curves if c.state == "pending") + len(out)
    eta = ""
    if durations and ahead:
        mean = sum(durations) / len(durations)
        waves = math.ceil(ahead / max(1, slots))
        eta = f", at least {ahead} point(s) ahead, ~{fmt_seconds(waves * mean)} at {fmt_seconds(mean)}/point"
    elif ahead:
        eta = f", at least {ahead} point(s) ahead"
    queued = f", {pending_text(waiting)}" if waiting else ""
    note = f"; {limit_note}" if limit_note else ""
    return (
        f"[sweep] {done} points done, {running} running{queued}, {blocked} curve(s) blocked, "
        f"{ended}/{len(curves)} curves ended{eta}{note}"
    )


def show(line: str, last: str) -> str:
    """Print `line` unless it is `last`; returns the line now shown."""
    if line != last:
        if sys.stderr.isatty():
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
    return line


def fmt_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
