"""Version 1's accounting rows in version 2's words, for `upgrade`: each receipt's, and the
copies collect published of them (results.json's receipts and points, results.csv's columns).

A Slurm receipt's row is read as the Slurm backend reads sacct's row today
(`sacct.job_accounting`); a local job's final accounting is rebuilt from the campaign's
registry, itself rewritten in today's format first (`upgrade_registry`), as the local
scheduler builds it (`local_jobs.job_accounting`). A Slurm row's time written without an
offset is read in this shell's zone, and counted, so that the upgrade can say so.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from throughput_schema import layout
from throughput_schema.local_jobs import job_accounting as local_accounting
from throughput_schema.sacct import AccountingRow, job_accounting, neutral_state, slurm_minutes

__all__ = ["Context", "UpgradeRefused", "receipt", "results_csv", "results_json"]


class UpgradeRefused(Exception):
    """One line: the file that cannot be upgraded, why, and what to do."""


@dataclass
class Context:
    """One campaign's upgrade: its scheduler and registry, and what it has read so far."""

    root: Path
    scheduler: str
    worker: str = ""  # the manifest's, for results that name none (`upgrade_results`)
    naive_times: int = 0
    naive_receipts: int = 0
    registry: dict[str, Any] = field(default_factory=dict)
    accounting: dict[str, dict] = field(default_factory=dict)  # attempt folder -> its upgraded accounting


def receipt(obj: dict, ctx: Context, attempt: Path) -> dict:
    acc = obj.get("accounting")
    if isinstance(acc, dict) and "state" in acc and "raw" not in acc:
        naive = ctx.naive_times
        obj["accounting"] = _accounting(acc, ctx, attempt / layout.RECEIPT, final=bool(obj.get("accounting_final")))
        ctx.naive_receipts += ctx.naive_times > naive
    ctx.accounting[attempt.relative_to(ctx.root).as_posix()] = obj.get("accounting") or {}
    return obj


def _accounting(acc: dict, ctx: Context, where: Path, *, final: bool) -> dict:
    """A version-1 accounting row (sacct's columns; the local registry's in the same form)
    as the backend reads its job today."""
    try:
        row = msgspec.convert(acc, AccountingRow)
    except msgspec.ValidationError as exc:
        raise UpgradeRefused(
            f"{where}: its accounting is not an accounting row ({exc}); nothing was rewritten"
        ) from None
    entry = ctx.registry.get(row.job_id) if ctx.scheduler == "local" and final else None
    if entry is None:
        row = msgspec.structs.replace(row, start=_with_offset(row.start, ctx), end=_with_offset(row.end, ctx))
        return msgspec.to_builtins(job_accounting(row))
    return msgspec.to_builtins(local_accounting(entry.job, entry.end))


def _with_offset(text: str, ctx: Context) -> str:
    """A time written without an offset, read as this shell's local time."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return text
    if when.tzinfo is not None:
        return text
    ctx.naive_times += 1
    return when.astimezone().astimezone(UTC).isoformat()  # as sacct's times are read today: UTC


def _point_columns(point: dict, ctx: Context) -> dict:
    """A published point's accounting columns, from its attempt's upgraded receipt."""
    try:
        rel = layout.attempt_dir(
            Path(), point["model"], int(point["context_length"]), int(point["batch_size"]), int(point["attempt"])
        ).as_posix()
    except (KeyError, ValueError, TypeError):
        rel = ""
    acc = ctx.accounting.get(rel)
    state, elapsed = point.pop("slurm_state", ""), point.pop("slurm_elapsed", "")
    if acc is not None:
        return {"job_state": acc.get("state", ""), "job_elapsed_seconds": acc.get("elapsed_seconds")}
    try:
        minutes = slurm_minutes(elapsed)
    except ValueError:
        minutes = None
    return {"job_state": neutral_state(state) if state else "", "job_elapsed_seconds": minutes and minutes * 60}


def _renamed(point: dict, columns: dict) -> dict:
    """`point` with its state and elapsed columns replaced where they stood."""
    out = {}
    for key, value in point.items():
        if key == "slurm_state":
            out.update(columns)
        elif key != "slurm_elapsed":
            out[key] = value
    return out


def results_json(obj: dict, ctx: Context) -> dict:
    for item in obj.get("receipts") or []:
        acc = item.get("accounting") if isinstance(item, dict) else None
        if isinstance(acc, dict) and "raw" not in acc:
            published = ctx.accounting.get(str(item.get("path")))
            item["accounting"] = (
                published if published else _accounting(acc, ctx, ctx.root / layout.RESULTS_JSON, final=False)
            )
    obj["points"] = [
        _renamed(p, _point_columns(dict(p), ctx)) if isinstance(p, dict) and "slurm_state" in p else p
        for p in obj.get("points") or []
    ]
    return obj


def results_csv(path: Path, ctx: Context) -> bytes | None:
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = next(csv.reader(io.StringIO(text)), [])
    if "slurm_state" not in header:
        return None
    out = io.StringIO()
    names = _renamed({h: None for h in header}, {"job_state": None, "job_elapsed_seconds": None})
    writer = csv.DictWriter(out, fieldnames=list(names), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        columns = _point_columns(dict(row), ctx)
        writer.writerow(_renamed(row, {k: "" if v is None else v for k, v in columns.items()}))
    return out.getvalue().encode()
