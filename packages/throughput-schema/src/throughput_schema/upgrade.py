"""`throughput-schema upgrade DIR`: a campaign written with schema version 1 rewritten in
version 2, once.

Version 2 stores each receipt's accounting in the project's words (`JobAccounting`, the
backend's own record kept in `raw`), names the manifest's removed environment, results'
state and elapsed columns and the audit's accounting field for no scheduler, and calls a
result the controller wrote in the scheduler's place by one phase ("scheduler"). The
profile's submit arguments and a local job's output file take their scheduler-neutral
names (`upgrade_names`), in a version-2 campaign written before them too, and a result
that names no worker is given the manifest's, with who wrote it told by its outcome where
one writer alone writes that outcome, else "upgrade" (`upgrade_results`).

Every file is read and rewritten in memory first: one the upgrade must read and cannot
refuses the whole campaign in one line, before anything is written. Then each file is
replaced atomically and each local job's output renamed, the manifest last, so an
interrupted upgrade leaves files that a second run finishes; a file already at version 2 is
left as it is. A local job registry older tools wrote is rewritten in today's format
(`upgrade_registry`). Files the upgrade does not know (the frozen sources, logs but for the
name of a local job's output, figures) are never touched: a frozen copy's own scripts (its
watchdog, its job scripts) stay as they were frozen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from throughput_schema import layout
from throughput_schema.audit import AUDIT_VERSION, AuditReport
from throughput_schema.codec import SchemaError, decode, dumps, write_atomic
from throughput_schema.local_jobs import LOCAL_JOBS_DIR, read_registry
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.records import (
    CurveClosure,
    Manifest,
    Receipt,
    Recipe,
    SubmissionIntent,
    WorkerRequest,
    WorkerResult,
)
from throughput_schema.upgrade_accounting import Context, UpgradeRefused, receipt, results_csv, results_json
from throughput_schema.upgrade_names import local_logs, profiles_renamed
from throughput_schema.upgrade_registry import receipts_by_job, registry
from throughput_schema.upgrade_results import with_worker
from throughput_schema.version import SCHEMA_VERSION

__all__ = ["FROM_VERSION", "Upgrade", "UpgradeRefused", "campaigns", "plan", "upgrade"]

FROM_VERSION = 1

# The records of a campaign, by file name, as today's code writes them.
_RECORDS: dict[str, type] = {
    layout.MANIFEST: Manifest,
    layout.INTENT: SubmissionIntent,
    layout.RECEIPT: Receipt,
    layout.REQUEST: WorkerRequest,
    layout.RESULT: WorkerResult,
    layout.BASELINE: WorkerResult,
    layout.CLOSURE: CurveClosure,
}
# Derived files whose JSON is kept as written, in its own key order.
_DERIVED = (layout.RESULTS_JSON, layout.OPTIMIZER_JSON, layout.COMPARISON_JSON)


@dataclass
class Upgrade:
    campaign: Path
    rewritten: list[str] = field(default_factory=list)  # relative paths, in the order written
    renamed: list[str] = field(default_factory=list)  # "old -> new", relative paths
    notes: list[str] = field(default_factory=list)


def campaigns(folder: Path) -> list[Path]:
    """`folder` when it is a campaign, else the campaigns directly in it (a worked example's)."""
    if (folder / layout.MANIFEST).is_file():
        return [folder]
    found = sorted(p for p in folder.iterdir() if (p / layout.MANIFEST).is_file()) if folder.is_dir() else []
    # A campaign naming a parent first: it records the hash of the parent's manifest as it
    # was, which its upgrade follows while the parent is still at version 1.
    return sorted(found, key=lambda p: _json(p / layout.MANIFEST).get("parent") is None)


def upgrade(root: Path) -> Upgrade:
    """Rewrite the campaign at `root` in the current schema version; UpgradeRefused names
    a file it cannot read (nothing is written then)."""
    done = Upgrade(root)
    planned = plan(root, done.notes)
    local = _json(root / layout.MANIFEST).get("profile", {}).get("scheduler") == "local"
    moves = local_logs(root) if local else {}
    manifest = planned.pop(root / layout.MANIFEST, None)
    for path in sorted(planned):
        write_atomic(path, planned[path])
        done.rewritten.append(path.relative_to(root).as_posix())
    for old, new in moves.items():
        old.rename(new)
        done.renamed.append(f"{old.relative_to(root).as_posix()} -> {new.name}")
    if manifest is not None:
        write_atomic(root / layout.MANIFEST, manifest)
        done.rewritten.append(layout.MANIFEST)
    return done


def plan(root: Path, notes: list[str]) -> dict[Path, bytes]:
    """Every file of the campaign that changes, with its version-2 bytes ({} where nothing
    does); what a person should know is added to `notes`."""
    manifest = _json(root / layout.MANIFEST)
    if _version(manifest) == SCHEMA_VERSION:
        return _names(root, manifest, notes)
    ctx = Context(root, str(manifest.get("profile", {}).get("scheduler", "")), worker=_worker(manifest))
    planned = _registry(root, manifest)
    if ctx.scheduler == "local":
        try:
            ctx.registry = read_registry(root / LOCAL_JOBS_DIR, planned)
        except SchemaError as exc:
            raise UpgradeRefused(f"{exc}; the local job registry must read to upgrade its receipts") from None
    for path in _files(root):
        data = _planned(path, ctx)
        if data is not None:
            planned[path] = data
    frozen = {
        p.relative_to(root / layout.FROZEN).as_posix(): data for p, data in planned.items() if _in_frozen(root, p)
    }
    planned[root / layout.MANIFEST] = _manifest(manifest, frozen, ctx, notes)
    if ctx.naive_receipts:
        notes.append(
            f"{ctx.naive_receipts} receipts held their job's times without an offset: read as local times of "
            f"this shell's zone ({datetime.now().astimezone().tzname()}); run the upgrade with TZ set to the zone "
            "the campaign was watched in if that was another"
        )
    notes.append(
        "its frozen copy (frozen/: the watchdog and sources it was frozen with) is not changed; collect, "
        "the audit and the report read the campaign, but a new attempt (--resume) runs today's job script "
        "on that copy, which a copy frozen by older tools may not understand: measure more in a new campaign"
    )
    return planned


# ------------------------------------------------------------------------- the files


def _files(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).parts
        if not path.is_file() or rel[0] == LOCAL_JOBS_DIR or path.name == layout.MANIFEST and len(rel) == 1:
            continue
        if rel[0] == layout.FROZEN and not (len(rel) == 3 and rel[1] == layout.RECIPES and path.suffix == ".json"):
            continue  # the frozen sources: never touched
        out.append(path)
    # Receipts before the files that copy them (results.json, results.csv).
    return sorted(out, key=lambda p: (p.name != layout.RECEIPT, str(p)))


def _in_frozen(root: Path, path: Path) -> bool:
    return path.relative_to(root).parts[0] == layout.FROZEN


def _planned(path: Path, ctx: Context) -> bytes | None:
    """The file's version-2 bytes, or None where it stays as it is."""
    name = path.name
    if name == layout.RESULTS_CSV:
        return results_csv(path, ctx)
    if name == layout.AUDIT:
        return _audit(path)
    record = Recipe if _in_frozen(ctx.root, path) else _RECORDS.get(name)
    if record is None and name not in _DERIVED:
        return None
    obj = _json(path)
    if not _holds(obj, FROM_VERSION):
        return None
    obj = _bumped(obj)
    if name == layout.RECEIPT:
        obj = receipt(obj, ctx, path.parent)
    elif record is WorkerResult:
        with_worker(obj, ctx.worker)
    elif name == layout.RESULTS_JSON:
        obj = results_json(obj, ctx)
        profiles_renamed(obj)
    if record is None:
        return json.dumps(obj, indent=2).encode() + b"\n"
    return dumps(_decoded(obj, record, path))


def _json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_bytes())
    except OSError as exc:
        raise UpgradeRefused(f"{path}: cannot read ({exc.strerror}); nothing was rewritten") from None
    except ValueError as exc:
        raise UpgradeRefused(
            f"{path}: not valid JSON ({exc}); nothing was rewritten: restore the file, or move it out of the campaign"
        ) from None
    if not isinstance(obj, dict):
        raise UpgradeRefused(f"{path}: not a JSON object; nothing was rewritten")
    _refuse_newer(obj, path)
    return obj


def _version(obj: dict) -> int:
    version = obj.get("schema_version", FROM_VERSION)
    return version if isinstance(version, int) else FROM_VERSION


def _refuse_newer(obj: dict, path: Path) -> None:
    if _version(obj) > SCHEMA_VERSION:
        raise UpgradeRefused(
            f"{path}: written with schema version {_version(obj)}, newer than this tool's {SCHEMA_VERSION}; "
            "upgrade the tools instead"
        )


def _holds(obj: Any, version: int) -> bool:
    """Whether a record of `version` is anywhere in `obj`."""
    if isinstance(obj, dict):
        return obj.get("schema_version") == version or any(_holds(v, version) for v in obj.values())
    if isinstance(obj, list):
        return any(_holds(v, version) for v in obj)
    return False


def _bumped(obj: Any) -> Any:
    """Every record version 1 -> 2, and the controller's phase named "scheduler"."""
    if isinstance(obj, list):
        return [_bumped(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _bumped(v) for k, v in obj.items()}
    if out.get("schema_version") == FROM_VERSION:
        out["schema_version"] = SCHEMA_VERSION
    if "kind" in out and out.get("phase") == "slurm":
        out["phase"] = "scheduler"
    return out


def _decoded(obj: dict, record: type, path: Path) -> Any:
    try:
        return decode(json.dumps(obj).encode(), record, source=str(path))
    except SchemaError as exc:
        raise UpgradeRefused(f"{exc}; nothing was rewritten") from None


def _audit(path: Path) -> bytes | None:
    obj = _json(path)
    if obj.get("audit_version") != 1:
        return None
    local = obj.pop("local_registry", "not_applicable") == "checked"
    obj = {
        ("scheduler_accounting" if k == "slurm" else k): ("checked" if k == "slurm" and local else v)
        for k, v in obj.items()
    }
    obj["audit_version"] = AUDIT_VERSION
    report = _decoded(obj, AuditReport, path)
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


# ---------------------------------------------------------------------------- manifest


def _manifest(obj: dict, frozen: dict[str, bytes], ctx: Context, notes: list[str]) -> bytes:
    obj = _bumped(obj)
    profiles_renamed(obj)
    if "slurm_environment_removed" in obj:
        obj["scheduler_environment_removed"] = obj.pop("slurm_environment_removed")
    for entry in obj.get("frozen_files") or []:
        data = frozen.get(entry.get("path"))
        if data is not None:
            entry.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    parent = obj.get("parent")
    if isinstance(parent, dict):
        _parent(parent, ctx.root, notes.append)
    return dumps(_decoded(obj, Manifest, ctx.root / layout.MANIFEST))


def _parent(parent: dict, root: Path, note: Callable[[str], None]) -> None:
    """The parent's manifest hash as the parent's upgrade writes it, while the parent is
    still at version 1 (at its recorded path, or beside this campaign under its folder's
    name, as a worked example keeps both): upgrade a folder of campaigns, or the child first."""
    where = Path(str(parent.get("path", "")))
    found = [p / layout.MANIFEST for p in (where if where.is_absolute() else root / where, root.parent / where.name)]
    manifest = next((m for m in found if m.is_file()), None)
    if manifest is None:
        note(f"its parent {where} is not there: the parent's manifest hash is kept as it was")
        return
    data = manifest.read_bytes()
    if hashlib.sha256(data).hexdigest() != parent.get("manifest_sha256"):
        note(f"its parent {manifest.parent} is not the manifest it recorded (upgraded before it?): its hash is kept")
        return
    try:
        upgraded = plan(manifest.parent, []).get(manifest)
    except UpgradeRefused:
        note(f"its parent {manifest.parent} does not upgrade: the parent's manifest hash is kept")
        return
    if upgraded is not None:  # None: the parent's manifest stays as it is
        parent["manifest_sha256"] = hashlib.sha256(upgraded).hexdigest()


def _registry(root: Path, manifest: dict) -> dict[Path, bytes]:
    """A local campaign's registry files that older tools wrote, in today's format."""
    if manifest.get("profile", {}).get("scheduler") != "local":
        return {}
    return registry(root, receipts_by_job(root, _json), UpgradeRefused)


def _worker(manifest: dict) -> str:
    return str(manifest.get("worker") or PRODUCTION_WORKER)


def _results(root: Path, manifest: dict) -> dict[Path, bytes]:
    """A version-2 campaign's results that name no worker, with the manifest's
    (`upgrade_results`), appended to what each holds."""
    planned: dict[Path, bytes] = {}
    for folder in layout.attempt_folders(root):
        for path in (folder / layout.RESULT, folder / layout.BASELINE):
            obj = _json(path) if path.is_file() else {}
            if obj and with_worker(obj, _worker(manifest)):
                _decoded(obj, WorkerResult, path)
                planned[path] = _as_written(obj)
    return planned


def _names(root: Path, manifest: dict, notes: list[str]) -> dict[Path, bytes]:
    """A version-2 campaign's files that still hold the profile field's old name (its
    manifest, results.json) or name no worker (its results), and the manifest where its
    parent's hash follows the parent's."""
    planned: dict[Path, bytes] = _results(root, manifest) | _registry(root, manifest)
    results = root / layout.RESULTS_JSON
    if results.is_file():
        obj = _json(results)
        if profiles_renamed(obj):
            planned[results] = json.dumps(obj, indent=2).encode() + b"\n"
    parent = manifest.get("parent")
    recorded = parent.get("manifest_sha256") if isinstance(parent, dict) else None
    if isinstance(parent, dict):
        _parent(parent, root, notes.append)
    if profiles_renamed(manifest) or (isinstance(parent, dict) and parent.get("manifest_sha256") != recorded):
        _decoded(manifest, Manifest, root / layout.MANIFEST)
        planned[root / layout.MANIFEST] = _as_written(manifest)
    return planned


def _as_written(obj: dict) -> bytes:
    """A version-2 record as it was written but for what the upgrade changed: a field added
    since keeps its default unwritten, and a measurement its own figures."""
    return msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n"
