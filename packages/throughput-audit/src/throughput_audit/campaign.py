"""Loading a campaign for the audit, and the checks on its files and curves.

The curve walk is the audit's own reading of the guide: batches 1, 2, 4, ... one at a
time; a fitting point leads to the next doubling; a `cuda_oom` ends the curve with the
boundary (largest fitting, first OOM = 2 x largest fitting); anything else blocks it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from throughput_schema import BurstSample, Manifest, Recipe, SchemaError, Settlement, WorkerResult, outcome_kind, read
from throughput_schema.layout import BURSTS, CURVES, FROZEN, INTENT, JOB_SCRIPT, MANIFEST, RECEIPT, RECIPES, RESULT, SETTLEMENT, Attempt, curve_name, load_attempt, parse_curve_name

from throughput_audit.findings import Checks, CurveFinding

def kind(result: WorkerResult | None) -> str | None:
    return None if result is None else outcome_kind(result.outcome)


@dataclass
class AttemptRecord:
    """One attempt folder, its decoded files, and how it counts."""

    attempt: Attempt
    rel: str  # folder relative to the campaign
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
    loaded = Loaded(root=root, manifest=manifest)
    curves_dir = root / CURVES
    if not curves_dir.is_dir():
        checks.fail("files.curves", CURVES, f"{CURVES}/: the campaign has no curves folder")
        return loaded
    for curve in sorted(curves_dir.iterdir()):
        if not curve.is_dir():
            continue
        try:
            parse_curve_name(curve.name)
        except ValueError:
            loaded.stray_curves.append(curve.name)
            continue
        for batch in sorted(curve.iterdir()):
            if not (batch.is_dir() and batch.name[:1] == "b" and batch.name[1:].isdigit() and batch.name[1] != "0"):
                continue
            for attempt in sorted(batch.iterdir()):
                if not (attempt.is_dir() and attempt.name.startswith("attempt-") and attempt.name[8:].isdigit()):
                    continue
                folder = rel(root, attempt)
                try:
                    a = load_attempt(attempt)
                except SchemaError as exc:
                    checks.fail("files.decode", folder, str(exc))
                    continue
                record = AttemptRecord(attempt=a, rel=folder)
                marker = attempt / SETTLEMENT
                if marker.exists():
                    try:
                        record.settlement = read(marker, Settlement).state
                    except SchemaError as exc:
                        checks.fail("files.decode", rel(root, marker), str(exc))
                if optimizer and (attempt / BURSTS).exists():
                    record.bursts = _read_bursts(attempt / BURSTS, rel(root, attempt / BURSTS), checks)
                loaded.attempts.append(record)
    loaded.attempts.sort(key=lambda r: (r.attempt.model, r.attempt.context_length, r.attempt.batch_size, r.attempt.attempt))
    return loaded


_burst_decoder = msgspec.json.Decoder(BurstSample)


def _read_bursts(path: Path, name: str, checks: Checks) -> list[BurstSample] | None:
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(_burst_decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            checks.fail("files.decode", name, f"{name}: line {n}: {exc}")
            return None
    return out


# ---------------------------------------------------------------------------- frozen


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_frozen(loaded: Loaded, checks: Checks) -> None:
    """Every frozen file against the manifest's sha256 and size; nothing extra, nothing missing."""
    frozen = loaded.root / FROZEN
    listed = loaded.manifest.frozen_files
    checks.expect(
        "frozen.listed",
        bool(listed),
        MANIFEST,
        f"{MANIFEST}: {len(listed)} frozen files listed",
        files=len(listed),
    )
    seen = set()
    for f in listed:
        seen.add(f.path)
        path = frozen / f.path
        name = f"{FROZEN}/{f.path}"
        if not path.is_file():
            checks.fail("frozen.sha256", name, f"{name}: listed in {MANIFEST} but missing", expected=f.sha256)
            continue
        digest, size = sha256(path), path.stat().st_size
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
            str(p.relative_to(frozen)) for p in frozen.rglob("*") if p.is_file() and str(p.relative_to(frozen)) not in seen
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
    script = a.path / JOB_SCRIPT
    sfile = record.file(JOB_SCRIPT)
    if script.is_file():
        digest = sha256(script)
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
            checks.fail("attempt.receipt", record.rel, f"{record.rel}: intent.json without receipt.json (unsettled submission)")
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


# ---------------------------------------------------------------------------- curves


def final_attempts(records: list[AttemptRecord]) -> dict[int, AttemptRecord]:
    """Per batch, the latest attempt that counts (void attempts never count)."""
    out: dict[int, AttemptRecord] = {}
    for r in records:
        if not r.void:
            b = r.attempt.batch_size
            if b not in out or r.attempt.attempt > out[b].attempt.attempt:
                out[b] = r
    return out


def status(record: AttemptRecord, *, optimizer: bool) -> str:
    """ok, cuda_oom, another outcome kind, 'baseline-<kind>', or 'no-result'."""
    a = record.attempt
    k = kind(a.result)
    if k is None:
        return record.settlement or "no-result"
    if optimizer and k == "ok":
        b = kind(a.baseline)
        if b != "ok":
            return f"baseline-{b or 'missing'}"
    return k


def check_retries(curve: str, records: list[AttemptRecord], checks: Checks) -> None:
    """Attempts at one batch are numbered 1..k and only a failed attempt is ever retried."""
    by_batch: dict[int, list[AttemptRecord]] = {}
    for r in records:
        by_batch.setdefault(r.attempt.batch_size, []).append(r)
    for b, rs in sorted(by_batch.items()):
        numbers = sorted(r.attempt.attempt for r in rs)
        counted = sorted((r for r in rs if not r.void), key=lambda r: r.attempt.attempt)
        retried_ok = [r.attempt.attempt for r in counted[:-1] if kind(r.attempt.result) == "ok"]
        checks.expect(
            "curve.attempts",
            numbers == list(range(1, len(numbers) + 1)) and not retried_ok,
            f"{CURVES}/{curve}/b{b}",
            f"{CURVES}/{curve}/b{b}: attempts {numbers}"
            + (f"; attempt {retried_ok[0]} succeeded yet was retried" if retried_ok else ""),
            attempts=numbers,
        )


def walk_throughput(curve: str, records: list[AttemptRecord], manifest: Manifest, checks: Checks) -> CurveFinding:
    finals = final_attempts(records)
    where = f"{CURVES}/{curve}"
    present = sorted(finals)
    top = present[-1] if present else 0
    doublings = []
    b = 1
    while b <= max(top, 1):
        doublings.append(b)
        b *= 2
    missing = [b for b in doublings if b <= top and b not in finals]
    odd = [b for b in present if b & (b - 1)]
    checks.expect(
        "curve.contiguous",
        not missing and not odd,
        where,
        f"{where}: batches {present}"
        + (f"; missing {missing} (gap in the doublings from 1)" if missing else "")
        + (f"; {odd} are not doublings of 1" if odd else "")
        + ("" if missing or odd else ": contiguous doublings from 1"),
        batches=present,
        missing=missing,
        not_doublings=odd,
    )
    cap = manifest.max_batch
    if cap is not None:
        over = [b for b in present if b > cap]
        checks.expect(
            "curve.cap",
            not over,
            where,
            f"{where}: batches {over} exceed --max-batch {cap}" if over else f"{where}: all batches within --max-batch {cap}",
            over=over,
            max_batch=cap,
        )
    finding = CurveFinding(curve=curve, state="pending", batches=present)
    fitting: list[int] = []
    unstable: list[int] = []
    end: int | None = None
    state, first_oom, blocked, reason = "pending", None, None, ""
    for b in doublings if present else []:
        r = finals.get(b)
        if r is None:
            state = "incomplete"
            reason = f"batch {b} has no attempt"
            end = b
            break
        s = status(r, optimizer=False)
        if s == "ok":
            fitting.append(b)
            tp = r.attempt.result.throughput
            if tp is not None and tp.unstable:
                unstable.append(b)
            continue
        end = b
        if s == "cuda_oom":
            state, first_oom = "bounded", b
        elif s == "no-result":
            state, reason = "incomplete", f"batch {b} ({r.rel}) has no result"
        else:
            state, blocked, reason = "blocked", b, f"batch {b} ({r.rel}) ended {s}"
        break
    else:
        if present:
            if cap is not None and top * 2 > cap:
                state = "capped"
            else:
                state, reason = "incomplete", f"batch {top} fitted and neither a CUDA OOM nor the cap followed"
    after = [b for b in present if end is not None and b > end]
    checks.expect(
        "curve.after_end",
        not after,
        where,
        f"{where}: batches {after} exist beyond batch {end}, which ended the curve ({state})"
        if after
        else f"{where}: no batch beyond the curve's end",
        beyond=after,
        end=end,
    )
    largest = fitting[-1] if fitting else None
    if state == "bounded":
        r = finals[first_oom]
        expected_oom = 2 * largest if largest else 1
        checks.expect(
            "curve.boundary",
            first_oom == expected_oom and kind(r.attempt.result) == "cuda_oom",
            r.file(RESULT),
            f"{r.file(RESULT)}: boundary largest fitting {largest}, first OOM {first_oom} "
            f"(2 x largest = {expected_oom}), set by outcome {kind(r.attempt.result)}",
            largest_fitting=largest,
            first_oom=first_oom,
            outcome=kind(r.attempt.result),
        )
    checks.expect(
        "curve.finished",
        state != "incomplete" and bool(present),
        where,
        f"{where}: {state}" + (f": {reason}" if reason else "") if present else f"{where}: no points at all",
        state=state,
    )
    return msgspec.structs.replace(
        finding,
        state=state if present else "pending",
        fitting_batches=fitting,
        largest_fitting_batch=largest,
        first_oom_batch=first_oom,
        unstable_batches=unstable,
        blocked_batch=blocked,
        blocked_reason=reason if state == "blocked" else "",
    )


def group(loaded: Loaded) -> dict[str, list[AttemptRecord]]:
    out: dict[str, list[AttemptRecord]] = {}
    for r in loaded.attempts:
        out.setdefault(r.attempt.curve, []).append(r)
    return out


def expected_curves(manifest: Manifest) -> list[str]:
    return [curve_name(m, c) for m in manifest.models for c in manifest.contexts]


def check_curve_set(loaded: Loaded, checks: Checks) -> None:
    names = set(group(loaded)) | set(loaded.stray_curves)
    extra = sorted(names - set(expected_curves(loaded.manifest)))
    checks.expect(
        "curve.unexpected",
        not extra,
        CURVES,
        f"{CURVES}/: curves {extra} are not in the manifest's models x contexts" if extra else f"{CURVES}/: only manifest curves",
        curves=extra,
    )
