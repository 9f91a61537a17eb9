"""Version 1's accounting rows in version 2's words, for `upgrade`: each receipt's, and the
copies collect published of them (results.json's receipts and points, results.csv's columns).

A version-1 row is sacct's text, which the schema does not read: its reader is found by the
entry point group `VERSION_ONE_READERS`, which the throughput-slurm package provides
(`throughput_slurm.version_one`, reading the row as the Slurm backend reads sacct's today);
without it, a campaign whose files hold such rows is refused in one line. A local job's
final accounting is rebuilt from the campaign's registry, itself rewritten in today's
format first (`upgrade_registry`), as the local scheduler builds it
(`local_jobs.job_accounting`). A Slurm row's time written without an offset is read in this
shell's zone, and counted, so that the upgrade can say so.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from throughput_schema import layout
from throughput_schema.local_jobs import job_accounting as local_accounting

__all__ = ["VERSION_ONE_READERS", "Context", "UpgradeRefused", "receipt", "results_csv", "results_json"]

VERSION_ONE_READERS = "throughput_schema.version_one_accounting"


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
    found_reader: ModuleType | None = None

    def reader(self, where: Path) -> ModuleType:
        """The version-1 row reader (`throughput_slurm.version_one`), looked up once a campaign."""
        if self.found_reader is None:
            found = entry_points(group=VERSION_ONE_READERS, name="sacct")
            if not found:
                raise UpgradeRefused(
                    f"{where}: its accounting is a version-1 sacct row, which only the throughput-slurm "
                    "package reads; install it beside throughput-schema (uv sync in the workspace) and "
                    "run the upgrade again; nothing was rewritten"
                )
            self.found_reader = next(iter(found)).load()
        return self.found_reader


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
    entry = ctx.registry.get(str(acc.get("job_id"))) if ctx.scheduler == "local" and final else None
    if entry is not None:
        return msgspec.to_builtins(local_accounting(entry.job, entry.end))
    try:
        return ctx.reader(where).accounting(acc, lambda text: _with_offset(text, ctx))
    except ValueError as exc:
        raise UpgradeRefused(
            f"{where}: its accounting is not an accounting row ({exc}); nothing was rewritten"
        ) from None


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
    reader = ctx.reader(ctx.root)
    return {"job_state": reader.state(state) if state else "", "job_elapsed_seconds": reader.elapsed_seconds(elapsed)}


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
