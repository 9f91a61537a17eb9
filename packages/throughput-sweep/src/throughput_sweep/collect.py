"""`throughput-sweep collect`: the campaign's README, tables and figures, from its files.

Throughput campaigns: README.md, results.csv, results.json, throughput.png, memory.png, and
energy.png where some point measured the GPU's energy (`NO_ENERGY_FIGURE` says so where none did).
Optimizer-timing campaigns add optimizer.csv, optimizer.json, optimizer-time.png and
optimizer-share.png: primary optimizer percentage = median window optimizer ms /
the paired baseline's full-iteration ms, with flags for remaining instability and for an
instrumented wall-time change over 5% against the baseline.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

from throughput_schema import layout, write_atomic
from throughput_schema.comparison import Recommendation
from throughput_schema.efficiency import EFFICIENCY_SENTENCE
from throughput_schema.provenance import HARDWARE_COLUMNS, hardware_mix, protocol_deviation, worker_warning
from throughput_schema.recommendation import THRESHOLD_SENTENCE, recommendation_text
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign, now
from throughput_sweep.curves import Curve, campaign_done, is_complete, unreceipted
from throughput_sweep.faults import crash_point
from throughput_sweep.figures import memory_bytes, plot_energy, plot_memory, plot_optimizer, plot_throughput
from throughput_sweep.frozen_profile import blocked_advice
from throughput_sweep.hardware import hardware_section, measured_hardware
from throughput_sweep.recommendations import recommendations
from throughput_sweep.status import closed_line
from throughput_sweep.usage import gpu_energy, gpu_hours

WALL_CHANGE_FLAG = 0.05
# collect's one line where no figure of energy is drawn: none stands empty in its place.
NO_ENERGY_FIGURE = f"{layout.ENERGY_PNG} not written: no measured point recorded the GPU's energy counter"

POINT_FIELDS = [
    "curve",
    "model",
    "context_length",
    "batch_size",
    "attempt",
    "status",
    "outcome",
    "job_id",
    "adopted",
    "slurm_state",
    "slurm_elapsed",
    "accounting_final",
    "tokens_per_second",
    "sequences_per_second",
    "cv",
    "unstable",
    "update_ms",
    "joules_per_token",
    "mean_watts",
    "windows",
    "setup_seconds",
    "setup_allocated_bytes",
    "setup_reserved_bytes",
    "measurement_allocated_bytes",
    "measurement_reserved_bytes",
    "parameters",
    *HARDWARE_COLUMNS,
    "gpu_uuid",
    "message",
]
OPT_FIELDS = [
    "curve",
    "model",
    "context_length",
    "batch_size",
    "attempt",
    "job_id",
    "baseline_tokens_per_second",
    "baseline_update_ms",
    "instrumented_tokens_per_second",
    "instrumented_update_ms",
    "optimizer_ms",
    "optimizer_percent",
    "share_of_wall",
    "share_of_graph",
    "optimizer_cv",
    "wall_change",
    "flag_unstable",
    "flag_wall_change_over_5pct",
]


def _point_columns(info: AttemptInfo) -> dict:
    """The columns that name an attempt, first in every table."""
    a = info.attempt
    return {
        "curve": a.curve,
        "model": a.model,
        "context_length": a.context_length,
        "batch_size": a.batch_size,
        "attempt": a.attempt,
    }


def point_row(info: AttemptInfo) -> dict:
    a = info.attempt
    r = info.measured
    t = r.throughput if r is not None else None
    acc = a.receipt.accounting if a.receipt else None
    return {
        **_point_columns(info),
        "status": info.status,
        "outcome": info.outcome,
        "job_id": info.job_id,
        "adopted": bool(a.receipt and a.receipt.adopted),
        "slurm_state": acc.state if acc else "",
        "slurm_elapsed": acc.elapsed if acc else "",
        "accounting_final": bool(a.receipt and a.receipt.accounting_final),
        "tokens_per_second": t.tokens_per_second if t else None,
        "sequences_per_second": t.sequences_per_second if t else None,
        "cv": t.cv if t else None,
        "unstable": info.unstable if t else None,
        "update_ms": t.update_ms if t else None,
        "joules_per_token": r.energy.joules_per_token if r is not None and r.energy is not None else None,
        "mean_watts": r.energy.mean_watts if r is not None and r.energy is not None else None,
        "windows": len(r.windows) if r is not None else None,
        "setup_seconds": r.setup_seconds if r is not None else None,
        "setup_allocated_bytes": memory_bytes(r, "setup", "allocated"),
        "setup_reserved_bytes": memory_bytes(r, "setup", "reserved"),
        "measurement_allocated_bytes": memory_bytes(r, "measurement", "allocated"),
        "measurement_reserved_bytes": memory_bytes(r, "measurement", "reserved"),
        "parameters": r.parameters if r is not None else None,
        **{c: getattr(r.hardware, c) if r is not None else "" for c in HARDWARE_COLUMNS},
        "gpu_uuid": r.hardware.gpu_uuid if r is not None else "",
        "message": info.message,
    }


def optimizer_row(info: AttemptInfo) -> dict | None:
    a = info.attempt
    base, inst = a.baseline, a.result
    if info.status != "ok" or base is None or inst is None or base.throughput is None or inst.throughput is None:
        return None
    timing = inst.optimizer_timing
    if timing is None:
        return None
    opt_ms = statistics.median(timing.window_optimizer_ms) if timing.window_optimizer_ms else timing.optimizer_ms
    base_ms = base.throughput.update_ms
    wall_change = (inst.throughput.update_ms - base_ms) / base_ms
    return {
        **_point_columns(info),
        "job_id": info.job_id,
        "baseline_tokens_per_second": base.throughput.tokens_per_second,
        "baseline_update_ms": base_ms,
        "instrumented_tokens_per_second": inst.throughput.tokens_per_second,
        "instrumented_update_ms": inst.throughput.update_ms,
        "optimizer_ms": opt_ms,
        "optimizer_percent": 100.0 * opt_ms / base_ms,
        "share_of_wall": timing.share_of_wall,
        "share_of_graph": timing.share_of_graph,
        "optimizer_cv": timing.optimizer_cv,
        "wall_change": wall_change,
        "flag_unstable": bool(base.throughput.unstable or inst.throughput.unstable or timing.unstable),
        "flag_wall_change_over_5pct": abs(wall_change) > WALL_CHANGE_FLAG,
    }


def _csv(rows: list[dict], fields: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    return buf.getvalue()


def _json(obj) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=False, default=str).encode() + b"\n"


def collect(campaign: Campaign) -> list[Path]:
    import msgspec

    m = campaign.manifest
    curves = campaign.curves()
    complete = is_complete(curves)
    infos = [i for c in curves for i in c.attempts]
    rows = [point_row(i) for i in infos]
    root = campaign.root
    written = []
    crash_point("while-collect")
    recommended = recommendations(curves)
    summaries = [
        msgspec.to_builtins(msgspec.structs.replace(c.summary(), recommendation=recommended[c.name])) for c in curves
    ]
    for s, c in zip(summaries, curves):
        if s.get("closure") is None:
            s.pop("closure", None)  # only a closed curve carries one
        s["description"] = c.describe
        s["cap"] = c.cap if c.state == "capped" else None
    results = {
        "campaign": m.name,
        "kind": m.kind,
        "complete": complete,
        "collected_at": now(),
        "models": m.models,
        "contexts": m.contexts,
        "max_batch": m.max_batch,
        "profile": msgspec.to_builtins(m.profile),
        "protocol": msgspec.to_builtins(m.protocol),
        "protocol_deviation": protocol_deviation(m.protocol),
        "hardware_mix": hardware_mix(map(measured_hardware, infos)),
        "parent": msgspec.to_builtins(m.parent) if m.parent else None,
        "curves": summaries,
        "points": rows,
        "receipts": [
            {"path": str(i.attempt.path.relative_to(root)), **msgspec.to_builtins(i.attempt.receipt)}
            for i in infos
            if i.attempt.receipt is not None
        ],
    }
    written.append(write_atomic(root / layout.RESULTS_JSON, _json(results)))
    written.append(write_atomic(root / layout.RESULTS_CSV, _csv(rows, POINT_FIELDS)))
    written.append(plot_throughput(root / layout.THROUGHPUT_PNG, curves, campaign.optimizer))
    energy_png = plot_energy(root / layout.ENERGY_PNG, curves, campaign.optimizer)
    written += [energy_png] if energy_png is not None else []
    written.append(plot_memory(root / layout.MEMORY_PNG, curves, campaign.optimizer))
    opt_rows: list[dict] = []
    if campaign.optimizer:
        opt_rows = [r for r in map(optimizer_row, infos) if r is not None]
        written.append(write_atomic(root / layout.OPTIMIZER_JSON, _json({"complete": complete, "points": opt_rows})))
        written.append(write_atomic(root / layout.OPTIMIZER_CSV, _csv(opt_rows, OPT_FIELDS)))
        written.append(
            plot_optimizer(root / layout.OPTIMIZER_TIME_PNG, opt_rows, "optimizer_ms", "optimizer ms per update")
        )
        written.append(
            plot_optimizer(
                root / layout.OPTIMIZER_SHARE_PNG, opt_rows, "optimizer_percent", "optimizer % of baseline update"
            )
        )
    written.append(
        write_atomic(
            root / layout.README,
            readme(campaign, curves, infos, complete, opt_rows, recommended, energy_png is not None),
        )
    )
    return written


def energy_note(written: list[Path]) -> str:
    """collect's line about energy.png: '' where it was written."""
    return "" if any(p.name == layout.ENERGY_PNG for p in written) else NO_ENERGY_FIGURE


def readme(
    campaign: Campaign,
    curves: list[Curve],
    infos: list[AttemptInfo],
    complete: bool,
    opt_rows: list[dict],
    recommended: dict[str, Recommendation],
    energy_png: bool = False,
) -> str:
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
    deviation = protocol_deviation(p)
    if deviation:
        out.append(f"**Note**: {deviation}.\n")
    out.append(f"{gpu_hours(infos, m.profile).line()}.\n")
    energy = gpu_energy(infos).line()
    if energy:
        out.append(f"{energy}.\n")
    efficient = any(c.most_efficient for c in curves)
    out += hardware_section(infos)
    out.append("## Curves\n")
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
    out += _optimizer_section(opt_rows)
    out.append("\n## Submission receipts\n")
    out.append("| point | attempt | job id | adopted | state | elapsed | exit | final accounting | result |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    out += [_receipt_row(i) for i in infos]
    out.append("\n## Files\n")
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
    return "\n".join(out)


def _state_cell(c: Curve) -> str:
    if c.state == "capped":
        return f"capped: no OOM up to the cap ({c.cap})"
    if c.state == "closed" and c.closure is not None:  # closed together with its closure
        return f"closed by hand at batch {c.closure.batch_size}"
    return c.state


def _optimizer_section(opt_rows: list[dict]) -> list[str]:
    if not opt_rows:
        return []
    out = [
        "\n## Optimizer time\n",
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
        f"{acc.state if acc else '-'} | {acc.elapsed if acc else '-'} | {acc.exit_code if acc else '-'} | "
        f"{'yes' if rec.accounting_final else 'no'} | {i.outcome} |"
    )


def _efficient_cells(c: Curve) -> str:
    best = c.most_efficient
    return f"{best[0]} | {best[1]:.4g}" if best else "- | -"
