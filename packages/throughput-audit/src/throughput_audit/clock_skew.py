"""A compute node's clock against the scheduler's.

The audit holds each worker's times within its job's Start and End. Those come from two
clocks: the node's (the worker's `started_at`, `finished_at`) and the scheduler's (sacct's
Start and End, or the local registry's). A node's clock may be off by seconds to minutes.
The job's watchdog records when it started (`job_started_at`, by the node's clock), before
any import or compile time. Against the job's Start it gives the node's offset plus the
moment the batch script took to start it; the median over the node's jobs is the node's skew.
The workers' times are compared after it is removed, and a skew beyond `BOUND_SECONDS` fails
`<source>.clock_skew`, naming the node.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from throughput_audit import job_states
from throughput_audit.campaign import AttemptRecord
from throughput_audit.findings import Checks
from throughput_audit.jobs import Source, worker_results
from throughput_schema.job_accounting import JobAccounting

# NTP keeps a cluster's clocks within milliseconds; minutes mean a node without it. Beyond
# this the node's times are not trusted at all.
BOUND_SECONDS = 300.0


def node_of(r: AttemptRecord, acc: JobAccounting) -> str:
    """The node the job ran on: the scheduler's word, else the worker's."""
    if acc.allocation.nodes:
        return acc.allocation.nodes
    result = r.attempt.result
    return result.hardware.hostname if result is not None else ""


def _offset(r: AttemptRecord, acc: JobAccounting) -> float | None:
    start = job_states.instant(acc.start)
    for _, res in worker_results(r):
        at = job_states.parse_time(res.job_started_at) if res.job_started_at else None
        if at is not None and start is not None:
            return (at - start).total_seconds()
    return None


def measure(source: Source, jobs: Iterable[tuple[AttemptRecord, JobAccounting]], checks: Checks) -> dict[str, float]:
    """Each node's skew in seconds (ahead of the scheduler: positive), one check per node."""
    offsets: dict[str, list[float]] = {}
    for r, acc in jobs:
        offset = _offset(r, acc)
        if offset is not None:
            offsets.setdefault(node_of(r, acc), []).append(offset)
    skews = {}
    for node, values in sorted(offsets.items()):
        skew = statistics.median(values)
        skews[node] = skew
        within = abs(skew) <= BOUND_SECONDS
        checks.expect(
            f"{source.prefix}.clock_skew",
            within,
            "",
            f"node {node or '?'}: its clock reads {abs(skew):.1f} s {'ahead of' if skew >= 0 else 'behind'} "
            f"{source.name}'s (median over {len(values)} jobs of each watchdog's start against the job's Start); "
            + (
                "the workers' times are compared after removing it"
                if within
                else "beyond what the audit accepts, so this node's times cannot be checked: set its clock (NTP)"
            )
            + f" (bound {BOUND_SECONDS:.0f} s)",
            node=node,
            skew_seconds=round(skew, 3),
            jobs=len(values),
            bound_seconds=BOUND_SECONDS,
        )
    return skews
