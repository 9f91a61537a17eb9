"""Loading a campaign for the audit, and the checks on its frozen files and on each
attempt's intent, receipt and job script."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from throughput_audit.findings import Checks
from throughput_schema import BurstSample, Manifest, Recipe, SchemaError, WorkerResult, outcome_kind, read
from throughput_schema.digests import sha256_bytes, sha256_file
from throughput_schema.layout import (
    BURSTS,
    CURVES,
    FROZEN,
    INTENT,
    JOB_SCRIPT,
    MANIFEST,
    RECEIPT,
    RECIPES,
    RESULT,
    SETTLEMENT,
    Attempt,
    AttemptFiles,
    attempt_folders,
    read_attempt,
    stray_curves,
)


@overload
def kind(result: WorkerResult) -> str: ...
@overload
def kind(result: WorkerResult | None) -> str | None: ...
def kind(result: WorkerResult | None) -> str | None:
    return None if result is None else outcome_kind(result.outcome)


@dataclass
class AttemptRecord:
    """One attempt folder, its decoded files, and how it counts."""

    attempt: Attempt
    rel: str  # folder relative to the campaign
    files: AttemptFiles
    settlement: str = ""  # never-submitted | refused | ambiguous | ""
    bursts: list[BurstSample] | None = None

    @property
    def void(self) -> bool:
        """Nothing was submitted: no intent, or the intent was settled as never submitted."""
        return self.attempt.intent is None or self.settlement == "never-submitted"

    def file(self, name: str) -> str:
        return f"{self.rel}/{name}"


@dataclass
class Loaded:
    root: Path
    manifest: Manifest
    attempts: list[AttemptRecord] = field(default_factory=list)
    stray_curves: list[str] = field(default_factory=list)


def rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load(root: Path, checks: Checks, *, optimizer: bool) -> Loaded:
    """Every attempt folder; a file that does not decode is a failed check, not a crash."""
    from throughput_schema.layout import load_manifest

    manifest = load_manifest(root)
    loaded = Loaded(root=root, manifest=manifest, stray_curves=stray_curves(root))
    if not (root / CURVES).is_dir():
        checks.fail("files.curves", CURVES, f"{CURVES}/: the campaign has no curves folder")
        return loaded
    for folder in attempt_folders(root):
        files = read_attempt(folder)
        where = rel(root, folder)
        try:
            a = files.decoded()
        except SchemaError as exc:
            checks.fail("files.decode", where, str(exc))
            continue
        record = AttemptRecord(attempt=a, rel=where, files=files)
        marker = files.files.get(SETTLEMENT)
        if marker is not None:
            if marker.error:
                checks.fail("files.decode", record.file(SETTLEMENT), marker.error)
            else:
                record.settlement = marker.record.state
        bursts = files.files.get(BURSTS)
        if optimizer and bursts is not None:
            if bursts.error:
                checks.fail("files.decode", record.file(BURSTS), bursts.error)
            else:
                record.bursts = bursts.record
        loaded.attempts.append(record)
    loaded.attempts.sort(
        key=lambda r: (r.attempt.model, r.attempt.context_length, r.attempt.batch_size, r.attempt.attempt)
    )
    return loaded


# ---------------------------------------------------------------------------- frozen


def check_frozen(loaded: Loaded, checks: Checks) -> None:
    """Every frozen file against the manifest's sha256 and size; nothing extra, nothing missing."""
    frozen = loaded.root / FROZEN
    listed = loaded.manifest.frozen_files
    checks.expect(
        "frozen.listed", bool(listed), MANIFEST, f"{MANIFEST}: {len(listed)} frozen files listed", files=len(listed)
    )
    seen = set()
    for f in listed:
        seen.add(f.path)
        path = frozen / f.path
        name = f"{FROZEN}/{f.path}"
        if not path.is_file():
            checks.fail("frozen.sha256", name, f"{name}: listed in {MANIFEST} but missing", expected=f.sha256)
            continue
        digest, size = sha256_file(path), path.stat().st_size
        checks.expect(
            "frozen.sha256",
            digest == f.sha256 and size == f.size,
            name,
            f"{name}: sha256 {digest[:16]}... ({size} bytes), {MANIFEST} says {f.sha256[:16]}... ({f.size} bytes)",
            actual=digest,
            expected=f.sha256,
            size=size,
            expected_size=f.size,
        )
    if frozen.is_dir():
        extra = sorted(
            str(p.relative_to(frozen))
            for p in frozen.rglob("*")
            if p.is_file() and str(p.relative_to(frozen)) not in seen
        )
        checks.expect(
            "frozen.unlisted",
            not extra,
            FROZEN,
            f"{FROZEN}/: {len(extra)} files not in {MANIFEST}" + (f": {', '.join(extra[:5])}" if extra else ""),
            files=extra,
        )


def frozen_recipe(loaded: Loaded, model: str, checks: Checks) -> tuple[Recipe | None, str]:
    name = f"{FROZEN}/{RECIPES}/{model}.json"
    path = loaded.root / name
    if not path.exists():
        return None, name
    try:
        return read(path, Recipe), name
    except SchemaError as exc:
        checks.fail("files.decode", name, str(exc))
        return None, name


# ------------------------------------------------------------------------ attempts


def check_attempt_files(loaded: Loaded, record: AttemptRecord, checks: Checks) -> None:
    """Intent, receipt and job script agree with the folder and with each other."""
    a, m = record.attempt, loaded.manifest
    intent, receipt = a.intent, a.receipt
    if record.void:
        checks.expect(
            "attempt.void",
            receipt is None and a.result is None,
            record.rel,
            f"{record.rel}: an attempt without a submission"
            + (" has a receipt or a result" if receipt is not None or a.result is not None else ""),
        )
        return
    assert intent is not None, "an attempt without an intent is void"
    ifile = record.file(INTENT)
    p = intent.point
    want_mode = "optimizer-timing" if m.kind == "optimizer-timing" else "throughput"
    got = (p.model, p.context_length, p.batch_size, p.attempt, p.mode)
    want = (a.model, a.context_length, a.batch_size, a.attempt, want_mode)
    checks.expect(
        "attempt.intent",
        got == want and intent.campaign == m.name and intent.scheduler == m.profile.scheduler,
        ifile,
        f"{ifile}: point {got}, campaign {intent.campaign!r}, scheduler {intent.scheduler}; the folder and "
        f"manifest say {want}, {m.name!r}, {m.profile.scheduler}",
        intent=list(got),
        folder=list(want),
    )
    script = record.files.files.get(JOB_SCRIPT)
    sfile = record.file(JOB_SCRIPT)
    if script is not None and script.data is not None:
        digest = sha256_bytes(script.data)
        checks.expect(
            "attempt.job_script",
            digest == intent.script_sha256,
            sfile,
            f"{sfile}: sha256 {digest[:16]}..., intent.json says {intent.script_sha256[:16]}...",
            actual=digest,
            expected=intent.script_sha256,
        )
    else:
        checks.fail("attempt.job_script", sfile, f"{sfile}: missing (intent.json records its sha256)")
    if receipt is None:
        if record.settlement in ("refused", "ambiguous"):
            checks.expect("attempt.receipt", True, record.rel, f"{record.rel}: no receipt; settled {record.settlement}")
        else:
            checks.fail(
                "attempt.receipt", record.rel, f"{record.rel}: intent.json without receipt.json (unsettled submission)"
            )
        return
    rfile = record.file(RECEIPT)
    checks.expect(
        "attempt.receipt",
        receipt.token == intent.token and receipt.scheduler == intent.scheduler and bool(receipt.job_id),
        rfile,
        f"{rfile}: token {receipt.token!r}, scheduler {receipt.scheduler}, job {receipt.job_id!r}; "
        f"intent.json has token {intent.token!r}, scheduler {intent.scheduler}",
        token=receipt.token,
        intent_token=intent.token,
        job_id=receipt.job_id,
    )
    checks.expect(
        "attempt.result",
        a.result is not None,
        record.file(RESULT),
        f"{record.file(RESULT)}: " + ("present" if a.result is not None else f"missing for job {receipt.job_id}"),
        job_id=receipt.job_id,
    )
