"""The README.md that `collect` writes: the campaign in prose, its curves, what failed, its files."""

from __future__ import annotations

from throughput_schema import layout
from throughput_schema.comparison import Recommendation
from throughput_schema.efficiency import EFFICIENCY_SENTENCE
from throughput_schema.precision import precision_label
from throughput_schema.provenance import guide_deviations, worker_warning
from throughput_schema.recommendation import THRESHOLD_SENTENCE, recommendation_text
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve, campaign_done, unreceipted
from throughput_sweep.frozen_profile import blocked_advice
from throughput_sweep.hardware import hardware_section
from throughput_sweep.status import closed_line
from throughput_sweep.usage import gpu_energy, gpu_hours, setup_share


def readme(
    campaign: Campaign,
    curves: list[Curve],
    infos: list[AttemptInfo],
    complete: bool,
    opt_rows: list[dict],
    recommended: dict[str, Recommendation],
    energy_png: bool = False,
) -> str:
    out = _heading(campaign, curves, infos, complete)
    out += hardware_section(infos)
    out += _curves_section(campaign, curves, recommended)
    out += _endings(campaign, curves)
    out += _optimizer_section(opt_rows)
    out.append("\n## Submission receipts\n")
    out.append("| point | attempt | job id | adopted | state | elapsed | exit | final accounting | result |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    out += [_receipt_row(i) for i in infos]
    out += _files_section(campaign, energy_png)
    return "\n".join(out)


def _heading(campaign: Campaign, curves: list[Curve], infos: list[AttemptInfo], complete: bool) -> list[str]:
    """Whether it finished, what it measured and under which protocol, what it used."""
    m = campaign.manifest
    out = []
    if not complete:
        state = "some curves are blocked" if campaign_done(curves) else "jobs are still running or pending"
        if unreceipted(curves):
            state = "jobs ran without a receipt; `throughput-sweep status` names them"
        out.append(f"**INCOMPLETE**: this campaign has not finished ({state}).\n")
    if worker_warning(m.worker):
        out.append(f"**{worker_warning(m.worker)}**.\n")
    out.append(f"# {m.kind.capitalize()} campaign {m.name}\n")
    out.append(
        f"Models {', '.join(m.models)} at contexts {', '.join(map(str, m.contexts))}; profile `{m.profile.name}` "
        f"({m.profile.scheduler}); created {m.created_at}; tool {m.tool_version}."
        + (f" Batches capped at {m.max_batch}." if m.max_batch else "")
        + (f" Parent campaign: `{m.parent.path}`." if m.parent else "")
        + "\n"
    )
    p = m.protocol
    out.append(
        f"Protocol: {p.warmup} warm-up updates, {p.windows} windows of {p.window_seconds:g} s "
        f"(+{p.extra_windows} when CV > {p.cv_threshold:.0%}), seed {p.seed}, LR {p.lr:g}, betas ({p.beta1:g}, {p.beta2:g}), "
        f"eps {p.eps:g}, weight decay {p.weight_decay:g}, clipping {p.grad_clip:g}.\n"
    )
    for deviation in guide_deviations(p):
        out.append(f"**Note**: {deviation}.\n")
    out.append(f"{gpu_hours(infos, m.profile).line()}.\n")
    for line in (gpu_energy(infos).line(), setup_share(infos).line()):
        if line:
            out.append(f"{line}.\n")
    return out


def _curves_section(campaign: Campaign, curves: list[Curve], recommended: dict[str, Recommendation]) -> list[str]:
    """The curve table, then each curve's recommended batch (a spot check points to its comparison)."""
    m = campaign.manifest
    efficient = any(c.most_efficient for c in curves)
    out = ["## Curves\n", f"Every curve trained at precision {precision_label(m.protocol.precision)}.\n"]
    head = "| curve | state | fitting batches | largest fitting | first OOM | fastest stable batch | tokens/s | recommended |"
    head += " most energy-efficient stable batch | J/token |" if efficient else ""
    out.append(f"{head} unstable |")
    out.append("|---" * (11 if efficient else 9) + "|")
    for c in curves:
        fast = c.fastest_stable
        out.append(
            f"| {c.name} | {_state_cell(c)} | {' '.join(map(str, c.fitting)) or '-'} | {c.largest_fitting or '-'} | "
            f"{c.first_oom or '-'} | {fast[0] if fast else '-'} | {f'{fast[1]:,.0f}' if fast else '-'} | "
            f"{recommended[c.name].recommended_batch or '-'} | "
            + (f"{_efficient_cells(c)} | " if efficient else "")
            + f"{' '.join(map(str, c.unstable)) or '-'} |"
        )
    if m.spot_check is None:  # a spot check's sample recommends nothing; its source did
        out.append(
            f"\nRecommended batches. {THRESHOLD_SENTENCE}" + (f" {EFFICIENCY_SENTENCE}" if efficient else "") + "\n"
        )
        out += [f"- {c.name}: {recommendation_text(recommended[c.name])}" for c in curves if c.fitting]
    else:
        assert m.parent is not None, "a spot check names its source campaign as its parent"
        out.append(
            f"\nA spot check of `{m.parent.path}`: its comparison with that campaign is in `{layout.SPOT_CHECK}/`."
        )
    return out


def _endings(campaign: Campaign, curves: list[Curve]) -> list[str]:
    """Blocked and closed curves, and every failed attempt."""
    out = []
    blocked = [c for c in curves if c.state == "blocked"]
    if blocked:
        out.append("\nBlocked curves (a blocked curve never sets a memory boundary):\n")
        out += [f"- {c.name}: {c.blocked_reason}" for c in blocked]
        advice = blocked_advice(campaign, curves, "throughput-sweep")
        out.append(f"\n**{advice[0].upper()}{advice[1:]}**.")
    closed = [c for c in curves if c.state == "closed"]
    if closed:
        out.append("\nCurves closed by hand (a closed curve never sets a memory boundary):\n")
        out += [f"- {c.name}: {closed_line(c.closure)}" for c in closed if c.closure is not None]
    failed = [i for c in curves for i in c.failed]
    out.append("\n## Failed attempts\n")
    if failed:
        out.append("| curve | batch | attempt | job | outcome | message |")
        out.append("|---|---|---|---|---|---|")
        for f in failed:
            out.append(
                f"| {f.attempt.curve} | {f.batch} | {f.number} | {f.job_id or '-'} | {f.outcome} | {f.message.replace('|', '/') or '-'} |"
            )
    else:
        out.append("None.")
    return out


def _files_section(campaign: Campaign, energy_png: bool) -> list[str]:
    out = ["\n## Files\n"]
    out.append("- `results.csv`, `results.json`: every attempt, curve summaries and receipts")
    out.append("- `throughput.png`: tokens/s against batch; `memory.png`: peak GPU memory against batch")
    if energy_png:
        out.append("- `energy.png`: GPU joules per token (the board's energy counter) against batch")
    if campaign.optimizer:
        out.append("- `optimizer.csv`, `optimizer.json`, `optimizer-time.png`, `optimizer-share.png`")
    out.append("- `curves/<model>-c<context>/b<batch>/attempt-<k>/`: intent, receipt, job script, raw results\n")
    out.append("![throughput](throughput.png)\n\n![memory](memory.png)\n")
    if energy_png:
        out.append("![energy](energy.png)\n")
    return out


def _state_cell(c: Curve) -> str:
    if c.state == "capped":
        return f"capped: no OOM up to the cap ({c.cap})"
    if c.state == "closed" and c.closure is not None:  # closed together with its closure
        return f"closed by hand at batch {c.closure.batch_size}"
    return c.state


def _optimizer_section(opt_rows: list[dict]) -> list[str]:
    if not opt_rows:
        return []
    names = sorted({r["optimizer"] for r in opt_rows})
    out = [
        "\n## Optimizer time\n",
        *([f"The optimizer step timed: {', '.join(names)} (the guide's is adamw).\n"] if names != ["adamw"] else []),
        "| curve | batch | optimizer ms | % of baseline update | share of wall | wall change | flags |",
    ]
    out.append("|---|---|---|---|---|---|---|")
    for r in opt_rows:
        flags = {"unstable": r["flag_unstable"], "wall change > 5%": r["flag_wall_change_over_5pct"]}
        out.append(
            f"| {r['curve']} | {r['batch_size']} | {r['optimizer_ms']:.3f} | {r['optimizer_percent']:.1f} | "
            f"{r['share_of_wall']:.3f} | {r['wall_change']:+.1%} | {', '.join(x for x, on in flags.items() if on) or '-'} |"
        )
    return out


def _receipt_row(i: AttemptInfo) -> str:
    rec = i.attempt.receipt
    if rec is None:
        return f"| {i.attempt.curve} b{i.batch} | {i.number} | - | - | - | - | - | - | {i.status} |"
    acc = rec.accounting
    return (
        f"| {i.attempt.curve} b{i.batch} | {i.number} | {rec.job_id} | {'yes' if rec.adopted else 'no'} | "
        f"{acc.state if acc else '-'} | {_seconds(acc.elapsed_seconds if acc else None)} | "
        f"{_exit(acc.exit_code, acc.signal) if acc else '-'} | "
        f"{'yes' if rec.accounting_final else 'no'} | {i.outcome} |"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _exit(code: int | None, signal: int | None) -> str:
    return "-" if code is None else f"{code}" + (f" (signal {signal})" if signal else "")


def _efficient_cells(c: Curve) -> str:
    best = c.most_efficient
    return f"{best[0]} | {best[1]:.4g}" if best else "- | -"
