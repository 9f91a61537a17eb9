"""What a campaign has used of the cluster so far: GPU-hours, from its receipts, and the GPU
energy its results measured.

Each receipt's accounting (its backend's reading of sacct, or of the local job registry)
gives the job's elapsed time and the GPUs the scheduler really allocated, else the
profile's `gpus_per_job`. A job without accounting yet (still out, or ended while no watcher
ran) is counted as not yet known.

The energy is what the GPU board's own counter measured over each result's windows and
setup (`throughput_schema.energy.counted_joules`): the rest of each job (start-up, imports,
teardown) and everything beyond the board (host, node, cooling) is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from throughput_schema import ClusterProfile
from throughput_schema.energy import JOULES_PER_KWH, counted_joules
from throughput_schema.setup_share import SetupShare
from throughput_schema.setup_share import setup_share as shared_setup_share
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.schedulers import backend


@dataclass(frozen=True)
class GpuHours:
    hours: float
    jobs: int  # jobs whose elapsed time is counted
    unknown: int  # jobs with a receipt but no elapsed time yet
    source: str  # where the times come from

    def line(self) -> str:
        if not self.jobs and not self.unknown:
            return "GPU-hours so far: 0 (no job has been accepted)"
        later = f"; {self.unknown} job(s) not counted yet (no accounting recorded)" if self.unknown else ""
        return f"GPU-hours so far: {self.hours:.2f} over {self.jobs} job(s) (elapsed times GPUs, from {self.source}){later}"


def gpu_hours(infos: list[AttemptInfo], profile: ClusterProfile) -> GpuHours:
    hours, jobs, unknown = 0.0, 0, 0
    scheduler = backend(profile.scheduler)
    for info in infos:
        receipt = info.attempt.receipt
        if receipt is None:
            continue
        acc = receipt.accounting
        if acc is None or acc.elapsed_seconds is None:  # no accounting, no elapsed time
            unknown += 1
            continue
        gpus = acc.allocation.gpus
        hours += acc.elapsed_seconds / 3600.0 * (gpus if gpus is not None else profile.gpus_per_job)
        jobs += 1
    return GpuHours(hours=hours, jobs=jobs, unknown=unknown, source=scheduler.accounting_source)


@dataclass(frozen=True)
class GpuEnergy:
    joules: float
    results: int  # results whose energy is counted
    unmeasured: int  # results with windows but no energy
    reason: str  # why there was none, as the first such result says

    def line(self) -> str:
        """'' for results from before energy was measured (no energy and no reason)."""
        if not self.results:
            return f"GPU energy: not measured ({self.reason})" if self.reason else ""
        without = f"; {self.unmeasured} result(s) without energy ({self.reason or 'no reason recorded'})"
        return (
            f"GPU energy measured so far: {self.joules / JOULES_PER_KWH:,.4f} kWh ({self.joules:,.0f} J) over "
            f"{self.results} result(s), the GPU board's counter over their windows and setup; the rest of each "
            f"job is not counted{without if self.unmeasured else ''}"
        )


def gpu_energy(infos: list[AttemptInfo]) -> GpuEnergy:
    """Every result's energy (an optimizer point's baseline too), from the points that have results."""
    joules, results, unmeasured, reason = 0.0, 0, 0, ""
    for info in infos:
        for r in (info.attempt.result, info.attempt.baseline):
            if r is None:
                continue
            if r.energy is not None:
                joules += counted_joules([w.energy for w in r.windows if w.energy is not None], r.energy.setup_joules)
                results += 1
                continue
            reason = reason or r.energy_unavailable
            unmeasured += bool(r.windows)
    return GpuEnergy(joules=joules, results=results, unmeasured=unmeasured, reason=reason)


def setup_share(infos: list[AttemptInfo]) -> SetupShare:
    """The jobs whose receipts have an elapsed time and whose workers wrote results."""

    def elapsed(info: AttemptInfo) -> float | None:
        receipt = info.attempt.receipt
        return receipt.accounting.elapsed_seconds if receipt is not None and receipt.accounting else None

    return shared_setup_share((elapsed(i), (i.attempt.result, i.attempt.baseline)) for i in infos)
