"""A result's worker, for `upgrade`: results written before they named their worker
(`WorkerResult.worker`) are given the manifest's worker, and who wrote the file.

Today three writers write a result, each with its own outcomes, so the outcome tells the
writer where exactly one of them writes it:

- the controller, from the scheduler's word: phase "scheduler" (`SCHEDULER_PHASE`);
- the job's watchdog on the node: its own phases (`WATCHDOG_PHASES`: a stop signal's
  "allocation", a worker that could not start or left no result, its deadline), and an
  earlier worker's outcome carried into the last result ("<label> worker: ..."; a paired
  optimizer point's baseline);
- the worker: every other outcome of a kind it writes (`WORKER_KINDS`).

What none of these rules names is recorded as written by "upgrade": the writer is unknown,
and the audit says so instead of guessing. The worker's version is left empty: the file
does not say it.
"""

from __future__ import annotations

import re
from typing import Any

from throughput_schema.outcomes import SCHEDULER_PHASE
from throughput_schema.provenance import PRODUCTION_WORKER

__all__ = ["WATCHDOG_PHASES", "WORKER_KINDS", "with_worker", "written_by"]

# The phases the watchdog (throughput_sweep.node) writes: "allocation" for a stop signal,
# "worker" or the worker's label where a worker could not start, ran past the deadline or
# exited without a result.
WATCHDOG_PHASES = frozenset({"allocation", "worker", "baseline", "instrumented"})
# The outcomes the worker (tiny_llm.worker) writes itself.
WORKER_KINDS = frozenset({"ok", "cuda_oom", "compile_error", "nonfinite", "crashed", "refused"})
_CARRIED = re.compile(r"^(baseline|instrumented|worker \d+) worker: ")


def written_by(outcome: dict[str, Any]) -> str:
    """Who wrote a result with this outcome, by today's writers; "upgrade" where none alone does."""
    phase, kind = outcome.get("phase", ""), outcome.get("kind", "")
    if phase == SCHEDULER_PHASE:
        return "controller"
    if phase in WATCHDOG_PHASES or _CARRIED.match(str(outcome.get("message", ""))):
        return "watchdog"
    return "worker" if kind in WORKER_KINDS else "upgrade"


def with_worker(obj: dict[str, Any], manifest_worker: str) -> bool:
    """Name the worker in a result that names none, in place; whether it named none."""
    if isinstance(obj.get("worker"), dict):
        return False
    outcome = obj.get("outcome")
    writer = written_by(outcome if isinstance(outcome, dict) else {})
    obj["worker"] = {"module": manifest_worker or PRODUCTION_WORKER, "version": "", "written_by": writer}
    return True
