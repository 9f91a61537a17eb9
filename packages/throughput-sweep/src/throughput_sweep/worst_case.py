"""A campaign's worst case before it runs: how many jobs at most, each to its time limit.

A dry run prints it (`worst_case`); a backend's preflight may hold it against an
allocation budget (`worst_case_jobs`).
"""

from __future__ import annotations

from throughput_schema.campaigns import CURVE_ENDED
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve

__all__ = ["worst_case", "worst_case_jobs"]


def worst_case_jobs(campaign: Campaign, curves: list[Curve]) -> tuple[int, bool]:
    """(jobs, bounded): the dry run's worst case in jobs, or, unbounded without --max-batch,
    the jobs of one doubling of every open curve."""
    m = campaign.manifest
    open_curves = [c for c in curves if c.state not in CURVE_ENDED or c.running]
    if any(c.planned is None for c in open_curves) and m.max_batch is None:
        return len(open_curves), False
    jobs = 0
    for c in open_curves:
        if c.planned is not None:
            batches = list(c.planned)
        else:  # --max-batch is set here: without it, the unbounded worst case returned above
            batches = [1 << k for k in range((m.max_batch or 0).bit_length())]
        jobs += sum(1 for b in batches if b not in c.fitting)
    return jobs, True


def worst_case(campaign: Campaign, curves: list[Curve]) -> str:
    """The dry run's bound: jobs at most, and those jobs each running to the time limit."""
    p = campaign.manifest.profile
    hours = p.time_limit_minutes * p.gpus_per_job / 60
    each = f"of up to {p.time_limit_minutes} min on {p.gpus_per_job} GPU(s)"
    jobs, bounded = worst_case_jobs(campaign, curves)
    if not bounded:
        return (
            f"worst case: unbounded without --max-batch (a curve doubles until its first CUDA OOM): each doubling "
            f"of the {jobs} open curve(s) is at most {jobs} job(s) {each}, {jobs * hours:.1f} GPU-hours"
        )
    return (
        f"worst case: at most {jobs} job(s) {each}: {jobs * hours:.1f} GPU-hours (every job running to its time limit)"
    )
