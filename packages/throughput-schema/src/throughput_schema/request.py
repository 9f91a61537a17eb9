"""The request of one attempt: everything the job needs, resolved once on the login node.

The controller writes it into the attempt folder before the batch script and the intent;
on the node the watchdog reads it to know its deadline and its workers, and each worker
reads it (`--request PATH`) for the recipe and the protocol it measures. Failure records
take their recipe from here too, so every result of an attempt names the same recipe.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from throughput_schema.configs import PointSpec, Protocol, Recipe, _Record
from throughput_schema.provenance import PRODUCTION_WORKER

__all__ = ["WorkerRequest"]


class WorkerRequest(_Record, frozen=True, kw_only=True):
    """One attempt at one point, fully resolved; every path is absolute."""

    point: PointSpec
    # The preset with the point (context, batch) and the campaign's protocol applied.
    recipe: Recipe
    protocol: Protocol
    # The campaign folder: the job's working directory.
    campaign: str
    # The compute node's Python and the frozen source folders it imports from.
    python: str
    pythonpath: list[str] = []
    # The worker module, run as `python -m <worker> benchmark-throughput-worker`.
    worker: str = PRODUCTION_WORKER
    # The watchdog's one deadline for all workers, imports and compilation included.
    deadline_seconds: Annotated[float, Meta(gt=0)] = 13 * 60.0
    # The scheduler's time limit: a stop signal near it is a time-out, earlier a cancellation.
    time_limit_seconds: Annotated[float, Meta(gt=0)] | None = None
    cpus: Annotated[int, Meta(gt=0)] = 8
    result: str
    # Optimizer campaigns: the uninstrumented worker of the same allocation writes here first.
    baseline: str = ""
    # Where the workers load and save compiled artifacts (`throughput_schema.compile_cache`):
    # the campaign's folder, "" for none (a spot check re-measures independently), and folders
    # they only load from (an optimizer follow-up's parent campaign, never written).
    compile_cache: str = ""
    compile_cache_read: list[str] = []

    @property
    def mode(self) -> Literal["throughput", "optimizer-timing"]:
        return self.point.mode
