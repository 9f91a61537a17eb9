"""A local job registry written by older tools, in today's format, for `upgrade`.

Today the local scheduler writes each job's host, the machine's CPUs and memory, its
times with their UTC offset, and its output as `local-<id>.out` (`local_jobs.LocalJob`).
An older registry lacks some of these; the upgrade fills what the campaign tells:

- the host: the node its receipt's accounting names (where a job has no receipt, the host
  the other receipts name; the local scheduler runs every job on its own machine);
- its times' offset: a job's record and its receipt, whose time names its offset, were
  written within moments of each other (the offset most jobs show, for a job without one;
  this shell's, where no receipt names one);
- its output: the name `upgrade_names` gave the file.

The machine's CPUs and memory stay unrecorded (0 and ""): nothing in the campaign says
them, and the audit says so of such a job.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from throughput_schema import layout
from throughput_schema.codec import SchemaError, decode, dumps
from throughput_schema.local_jobs import LOCAL_JOBS_DIR, LocalEnd, LocalJob, job_log

__all__ = ["receipts_by_job", "registry"]

_OLD_LOG = "slurm-{}.out"


def registry(root: Path, receipts: dict[str, dict[str, Any]], refused: type[Exception]) -> dict[Path, bytes]:
    """The registry's files that change, with today's bytes. `receipts`: each job's receipt
    as read (by job id); `refused`: the error that names a file the upgrade cannot read."""
    jobs_dir = root / LOCAL_JOBS_DIR
    if not jobs_dir.is_dir():
        return {}
    records = {p: _json(p, refused) for p in sorted(jobs_dir.glob("*.json")) if p.name.split(".")[0].isdigit()}
    jobs = {str(obj.get("job_id")): obj for p, obj in records.items() if not p.name.endswith(".end.json")}
    hosts = {job_id: _host(r) for job_id, r in receipts.items()}
    usual_host = Counter(h for h in hosts.values() if h).most_common(1)
    offsets = {job_id: _offset(job.get("submitted_at"), receipts.get(job_id)) for job_id, job in jobs.items()}
    usual = Counter(o for o in offsets.values() if o is not None).most_common(1)
    # No receipt names an offset: this shell's zone, as a version-1 receipt's times are read.
    fallback = usual[0][0] if usual else datetime.now().astimezone().utcoffset()
    planned: dict[Path, bytes] = {}
    for path, obj in records.items():
        job_id = str(obj.get("job_id"))
        own = offsets.get(job_id)
        offset = own if own is not None else fallback
        new = dict(obj)
        for key in ("submitted_at", "start", "end"):
            if isinstance(new.get(key), str):
                new[key] = _at_offset(new[key], offset)
        end = path.name.endswith(".end.json")
        if not end:
            new.setdefault("host", hosts.get(job_id) or (usual_host[0][0] if usual_host else ""))
            output = Path(str(new.get("output", "")))
            if output.name == _OLD_LOG.format(job_id):
                new["output"] = str(output.with_name(job_log(job_id)))
        if new != obj:
            record = _decoded(new, LocalEnd if end else LocalJob, path, refused)
            planned[path] = dumps(record)
    return planned


def _json(path: Path, refused: type[Exception]) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise refused(f"{path}: cannot read the local job registry ({exc}); nothing was rewritten") from None
    if not isinstance(obj, dict):
        raise refused(f"{path}: not a JSON object; nothing was rewritten")
    return obj


def _decoded(obj: dict[str, Any], record: type, path: Path, refused: type[Exception]) -> Any:
    try:
        return decode(json.dumps(obj).encode(), record, source=str(path))
    except SchemaError as exc:
        raise refused(f"{exc}; nothing was rewritten") from None


def _host(receipt: dict[str, Any]) -> str:
    """The node a receipt's accounting names: a version-1 row's, or today's allocation's."""
    acc = receipt.get("accounting")
    if not isinstance(acc, dict):
        return ""
    allocation = acc.get("allocation")
    if isinstance(allocation, dict):
        return str(allocation.get("nodes") or "")
    return str(acc.get("node_list") or "")


def _offset(local: Any, receipt: dict[str, Any] | None) -> timedelta | None:
    """The UTC offset of a job record's time written without one, from its receipt's."""
    try:
        wall = datetime.fromisoformat(str(local))
        instant = datetime.fromisoformat(str((receipt or {}).get("submitted_at", "")))
    except ValueError:
        return None
    if wall.tzinfo is not None or instant.utcoffset() is None:
        return None
    seconds = (wall - instant.astimezone(UTC).replace(tzinfo=None)).total_seconds()
    return timedelta(seconds=round(seconds / 900) * 900)


def _at_offset(text: str, offset: timedelta | None) -> str:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return text
    if when.tzinfo is not None or offset is None:
        return text
    return when.replace(tzinfo=timezone(offset)).isoformat()


def receipts_by_job(root: Path, read_json: Any) -> dict[str, dict[str, Any]]:
    """Each attempt's receipt as read, by its job id."""
    found: dict[str, dict[str, Any]] = {}
    for folder in layout.attempt_folders(root):
        path = folder / layout.RECEIPT
        if path.is_file():
            obj = read_json(path)
            found[str(obj.get("job_id", ""))] = obj
    return found
