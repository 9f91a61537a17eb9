"""A campaign written by today's code, rewritten as schema version 1 wrote it: what
`throughput-schema upgrade` is tested against.

Version 1 kept each receipt's accounting as sacct's row (the local scheduler built the
same row from its registry), named the manifest's removed environment and results'
state and elapsed columns for Slurm, and the audit's accounting field `slurm`; its profiles
held `extra_sbatch_args`, a local job wrote its output to `slurm-<id>.out`, its results
named no worker, and the local registry held neither host nor machine nor times' offsets.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import msgspec

from throughput_audit.local_registry import accounting_row
from throughput_schema.local_jobs import LocalEnd, LocalJob
from throughput_slurm.sacct import raw_row


def as_version_one(campaign: Path, *, watched_in: str | None = None) -> None:
    """`campaign` as version 1 wrote it; `watched_in`: a zone whose wall times the receipts
    hold without an offset, as sacct printed them before times carried one."""
    manifest = json.loads((campaign / "manifest.json").read_text())
    rows: dict[str, dict] = {}
    for path in sorted(campaign.glob("curves/*/b*/attempt-*/receipt.json")):
        data = _v1(json.loads(path.read_text()))
        if data.get("accounting"):
            data["accounting"] = _row(data["accounting"], manifest["profile"]["account"], watched_in)
        rows[path.parent.relative_to(campaign).as_posix()] = data["accounting"] or {}
        _write(path, data)
    frozen = {}
    for path in sorted(campaign.glob("curves/**/*.json")) + sorted(campaign.glob("frozen/recipes/*.json")):
        if path.name != "receipt.json":
            obj = _v1(json.loads(path.read_text()))
            if path.name in ("result.json", "baseline.json"):
                obj.pop("worker", None)  # results named their worker late in version 1
            data = _write(path, obj)
            if path.parts[-3] == "frozen":
                frozen[f"recipes/{path.name}"] = data
    _results(campaign, rows)
    manifest = _v1(manifest)
    manifest["slurm_environment_removed"] = manifest.pop("scheduler_environment_removed")
    manifest["profile"] = _old_profile(manifest["profile"])
    if manifest["profile"]["scheduler"] == "local":
        for log in campaign.glob("curves/*/b*/attempt-*/local-*.out"):
            log.rename(log.with_name("slurm-" + log.name.removeprefix("local-")))
        _old_registry(campaign / ".local-jobs")
    for entry in manifest["frozen_files"]:
        if entry["path"] in frozen:
            entry.update(sha256=hashlib.sha256(frozen[entry["path"]]).hexdigest(), size=len(frozen[entry["path"]]))
    if watched_in:
        manifest["watcher_zone"] = ""
    _write(campaign / "manifest.json", manifest)
    audit = campaign / "audit.json"
    if audit.exists():
        report = json.loads(audit.read_text())
        accounting = report.pop("scheduler_accounting")
        local = manifest["profile"]["scheduler"] == "local"
        report = {"audit_version": 1, **{k: v for k, v in report.items() if k != "audit_version"}}
        report["slurm"] = "not_applicable" if local else accounting
        report["local_registry"] = accounting if local else "not_applicable"
        _write(audit, report)


def _old_registry(jobs: Path) -> None:
    """The local scheduler's registry as older tools wrote it: no host, machine CPUs or
    memory, local times without their offset, each job's output as slurm-<id>.out."""
    for path in sorted(jobs.glob("*.json")):
        obj = json.loads(path.read_text())
        for key in ("submitted_at", "start", "end"):
            if key in obj:
                obj[key] = datetime.fromisoformat(obj[key]).replace(tzinfo=None).isoformat()
        if not path.name.endswith(".end.json"):
            for key in ("host", "machine_cpus", "machine_mem"):
                obj.pop(key)
            output = Path(obj["output"])
            obj["output"] = str(output.with_name("slurm-" + output.name.removeprefix("local-")))
        _write(path, obj)


def _v1(obj):
    if isinstance(obj, list):
        return [_v1(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _v1(v) for k, v in obj.items()}
    if "schema_version" in out:
        out["schema_version"] = 1
    if "kind" in out and out.get("phase") == "scheduler":
        out["phase"] = "slurm"
    return out


def _row(accounting: dict, account: str, watched_in: str | None) -> dict:
    raw = accounting["raw"]
    if raw.startswith("{"):  # the local registry's records
        records = json.loads(raw)
        job = msgspec.convert(records["job"], LocalJob)
        end = msgspec.convert(records["end"], LocalEnd) if records["end"] else None
        row = accounting_row(job, end, account=account)
    else:
        row = raw_row(raw)
    out = msgspec.to_builtins(row)
    if watched_in:
        for field in ("start", "end"):
            when = datetime.fromisoformat(out[field])
            out[field] = when.astimezone(ZoneInfo(watched_in)).replace(tzinfo=None).isoformat()
    return out


def _results(campaign: Path, rows: dict[str, dict]) -> None:
    path = campaign / "results.json"
    if not path.exists():
        return
    data = _v1(json.loads(path.read_text()))
    data["profile"] = _old_profile(data["profile"])
    for item in data["receipts"]:
        item["accounting"] = rows[item["path"]] or None
    by_job = {row.get("job_id"): row for row in rows.values() if row}
    data["points"] = [_point(p, by_job) for p in data["points"]]
    _write(path, data)
    table = list(csv.DictReader(io.StringIO((campaign / "results.csv").read_text())))
    out = io.StringIO()
    points = [_point(p, by_job) for p in table]
    writer = csv.DictWriter(out, fieldnames=list(points[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(points)
    (campaign / "results.csv").write_text(out.getvalue())


def _old_profile(profile: dict) -> dict:
    return {("extra_sbatch_args" if k == "extra_submit_args" else k): v for k, v in profile.items()}


def _point(point: dict, by_job: dict[str, dict]) -> dict:
    row = by_job.get(str(point.get("job_id") or ""), {})
    out = {}
    for key, value in point.items():
        if key == "job_state":
            out["slurm_state"] = row.get("state", "")
        elif key == "job_elapsed_seconds":
            out["slurm_elapsed"] = row.get("elapsed", "")
        else:
            out[key] = value
    return out


def _write(path: Path, data) -> bytes:
    encoded = (json.dumps(data, indent=2) + "\n").encode()
    path.write_bytes(encoded)
    return encoded
