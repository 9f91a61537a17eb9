"""Hidden fault-injection hooks for the reliability tests.

`THROUGHPUT_SWEEP_CRASH_AT=STEP` (or `STEP@N` for the N-th time the step is reached)
makes the watcher SIGKILL itself at that exact step, so tests can prove that a crash at
any instant loses nothing and submits nothing twice. Steps: before-intent,
after-request (request.json and job.sh written, no intent yet), after-intent,
after-submit, after-receipt, while-result, while-collect.
Unset (the normal case) these are no-ops.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "THROUGHPUT_SWEEP_CRASH_AT"
_seen: Counter[str] = Counter()


def should_crash(step: str) -> bool:
    spec = os.environ.get(ENV, "")
    if not spec:
        return False
    name, _, nth = spec.partition("@")
    if name != step:
        return False
    _seen[step] += 1
    return _seen[step] == (int(nth) if nth.isdigit() else 1)


def crash_point(step: str) -> None:
    if should_crash(step):
        os.kill(os.getpid(), signal.SIGKILL)
