"""`throughput-sweep status`: where every curve stands, from the campaign files alone."""

from __future__ import annotations

import shlex

from throughput_schema import CurveClosure
from throughput_schema.comparison import Recommendation
from throughput_schema.provenance import guide_deviations, worker_warning
from throughput_schema.recommendation import recommendation_text
from throughput_sweep.budget import budget_line, stopped_on
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve, campaign_done, is_complete, unreceipted
from throughput_sweep.exit_statuses import (
    EXIT_BLOCKED,
    EXIT_BUDGET,
    EXIT_COMPLETE,
    EXIT_INCOMPLETE,
    EXIT_SPOT_CHECK_FAILED,
)
from throughput_sweep.flags import PROG
from throughput_sweep.frozen_profile import blocked_advice, profile_refused
from throughput_sweep.live import Live
from throughput_sweep.recommendations import recommendations
from throughput_sweep.usage import gpu_energy, gpu_hours, setup_share

OFFLINE = Live(driver="", resume="", watcher="", watcher_alive=False, jobs=None)  # the files' view alone


def exit_status(curves: list[Curve]) -> int:
    if is_complete(curves):
        return EXIT_COMPLETE
    if unreceipted(curves):  # a job that ran without its receipt outranks every other ending
        return EXIT_INCOMPLETE
    if stopped_on(curves):
        return EXIT_BUDGET
    return EXIT_BLOCKED if campaign_done(curves) else EXIT_INCOMPLETE


def campaign_exit_status(campaign: Campaign, curves: list[Curve] | None = None) -> int:
    """exit_status, and for a complete spot check whose comparison fails, EXIT_SPOT_CHECK_FAILED.
    `curves`: the campaign's, where the caller has them already."""
    status = exit_status(campaign.curves() if curves is None else curves)
    if status == EXIT_COMPLETE and campaign.manifest.spot_check is not None:
        from throughput_sweep.spot_check import failed

        return EXIT_SPOT_CHECK_FAILED if failed(campaign) else status
    return status


def receipt_advice(campaign: Campaign, curves: list[Curve], driver: str) -> str:
    """What to do about the jobs that ran without a receipt ('' when every job has one)."""
    missing = unreceipted(curves)
    if not missing:
        return ""
    where = shlex.quote(str(campaign.root))
    names = ", ".join(f"{i.attempt.path.relative_to(campaign.root)} (token {i.attempt.token})" for i in missing)
    return (
        f"{len(missing)} job(s) ran without a receipt, so the campaign is not complete: {names}; "
        f"`{driver} run --output {where} --resume` looks each up by its token again, or "
        f"`{driver} reconcile --output {where} --token TOKEN --job-id ID` records the job that ran"
    )


def closed_line(closure: CurveClosure) -> str:
    """How every output names a closed curve (status, collect's README)."""
    return (
        f"closed by hand at batch {closure.batch_size}: {closure.reason} (attempt {closure.attempt}, "
        f"{closure.outcome}; {closure.user}@{closure.host}, {closure.closed_at})"
    )


def render_status(campaign: Campaign, live: Live | None = None) -> str:
    """The campaign from its files; with `live` (status), also the watcher and the scheduler's word."""
    m = campaign.manifest
    curves = campaign.curves()
    ended = campaign_done(curves) and not unreceipted(curves)
    budget = stopped_on(curves)
    label = (
        "complete"
        if is_complete(curves)
        else "STOPPED on its allocation budget"
        if budget
        else ("ended with blocked curves" if ended else "INCOMPLETE")
    )
    lines = [
        f"campaign {campaign.root} ({m.kind}, profile {m.profile.name}, scheduler {m.profile.scheduler}): {label}",
        f"models {' '.join(m.models)}; contexts {' '.join(map(str, m.contexts))}"
        + (f"; max batch {m.max_batch}" if m.max_batch else ""),
        *filter(None, [worker_warning(m.worker)]),
        *guide_deviations(m.protocol),
        gpu_hours([i for c in curves for i in c.attempts], m.profile).line(),
        *filter(None, [gpu_energy([i for c in curves for i in c.attempts]).line()]),
        *filter(None, [setup_share([i for c in curves for i in c.attempts]).line()]),
        *filter(None, [receipt_advice(campaign, curves, live.driver if live else PROG)]),
        *(filter(None, [live.watcher, live.summary()]) if live else []),
        "",
        f"{'curve':<18} {'state':<9} {'fitting':<24} {'largest':>7} {'1st OOM':>7} {'fastest stable':>22}",
    ]
    recommended = recommendations(curves)
    for c in curves:
        lines += _curve_lines(c, m.spot_check is None, recommended, live, m.profile.scheduler)
    if m.spot_check is not None:
        from throughput_sweep.spot_check import verdict_lines

        lines += ["", *verdict_lines(campaign)]
    if budget:
        lines += ["", budget_line(campaign, budget, live.driver if live else "throughput-sweep")]
    elif live and not live.watcher_alive and any(c.state == "blocked" for c in curves):
        lines += ["", blocked_advice(campaign, curves, live.driver)]
    return "\n".join(lines) + "\n"


def _curve_lines(
    c: Curve, recommends: bool, recommended: dict[str, Recommendation], live: Live | None, scheduler: str
) -> list[str]:
    """One curve's row of the table and the indented notes under it."""
    out: list[str] = []
    fastest = c.fastest_stable
    fast = f"b{fastest[0]} {fastest[1]:,.0f} tok/s" if fastest else "-"
    out.append(
        f"{c.name:<18} {c.state:<9} {' '.join(map(str, c.fitting)) or '-':<24} "
        f"{c.largest_fitting or '-':>7} {c.first_oom or '-':>7} {fast:>22}"
    )
    if c.state == "capped":
        out.append(f"    no OOM up to the cap (batch {c.cap}); not a memory boundary")
    efficient = c.most_efficient
    if efficient:
        out.append(f"    most energy-efficient stable batch: b{efficient[0]} {efficient[1]:.4g} J/token")
    if c.state == "blocked":
        out.append(f"    blocked: {c.blocked_reason}")
        if fields := profile_refused(c, scheduler):
            out.append(f"    refused for the campaign's frozen profile (check its {fields}); not worth retrying")
    if c.state == "closed" and c.closure is not None:  # a curve is closed together with its closure
        out.append(f"    {closed_line(c.closure)}; not a memory boundary")
    if c.done and c.fitting and recommends:  # a sample recommends nothing
        out.append(f"    recommended: {recommendation_text(recommended[c.name])}")
    if c.unstable:
        out.append(f"    unstable (CV above threshold after extra windows): batch {' '.join(map(str, c.unstable))}")
    for r in c.running:
        out.append(f"    {(live or OFFLINE).job_line(r)}")
    if c.next and c.state == "pending":
        out.append(f"    next: batch {' '.join(str(n.batch_size) for n in c.next)}")
    for f in c.failed:
        job = f" job {f.job_id}" if f.job_id else ""
        token = f" token {f.attempt.token}" if f.status == "ambiguous" else ""
        msg = f": {f.message}" if f.message else ""
        out.append(f"    failed: batch {f.batch} attempt {f.number}{job}{token} {f.outcome}{msg}")
    jobs = [f"b{i.batch}/a{i.number}={i.job_id}" for i in c.attempts if i.job_id]
    if jobs:
        out.append(f"    jobs: {' '.join(jobs)}")
    return out
