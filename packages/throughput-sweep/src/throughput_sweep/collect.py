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
from throughput_schema.muon import optimizer_deviation
from throughput_schema.precision import precision_deviation
from throughput_schema.provenance import HARDWARE_COLUMNS, hardware_mix, protocol_deviation
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign, now
from throughput_sweep.collect_readme import readme
from throughput_sweep.curves import is_complete
from throughput_sweep.faults import crash_point
from throughput_sweep.figures import memory_bytes, plot_energy, plot_memory, plot_optimizer, plot_throughput
from throughput_sweep.hardware import measured_hardware
from throughput_sweep.recommendations import recommendations

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
    "job_state",
    "job_elapsed_seconds",
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
    "optimizer",  # the recipe's optimizer.name: whose share optimizer_percent is
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
        "job_state": acc.state if acc else "",
        "job_elapsed_seconds": acc.elapsed_seconds if acc else None,
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
        "optimizer": inst.recipe.optimizer.name,
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
        "precision_deviation": precision_deviation(m.protocol.precision),
        "optimizer_deviation": optimizer_deviation(m.protocol),
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
