"""Reading a campaign for comparison through the schema's campaign reader, hashing the
exact bytes decoded, and refusing a campaign the audit has not passed.

Per point the attempt that counts is the schema's (`counting_attempts`); its rate is read
when it succeeded, and for an optimizer-timing campaign the rate is its uninstrumented
baseline's, as in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from throughput_schema import noise as spread
from throughput_schema import outcome_kind
from throughput_schema.audit import AuditReport
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import (
    AUDIT,
    BASELINE,
    INTENT,
    MANIFEST,
    RECEIPT,
    RESULT,
    SETTLEMENT,
    AttemptFiles,
    FileRead,
    attempt_folders,
    counting_attempts,
    curve_name,
    is_void,
    read_attempt,
    read_file,
)
from throughput_schema.recommendation import PointRate, campaign_noise
from throughput_schema.records import Manifest, WorkerResult


class Refused(Exception):
    """The comparison cannot be made; the message is one line naming what and how to fix it."""


@dataclass(frozen=True)
class Measured:
    """One point as it counts: the attempt that counts, when its measurement succeeded."""

    curve: str
    batch: int
    attempt: int
    result: WorkerResult  # the record the rate comes from (the baseline in optimizer campaigns)
    rate: float
    window_rates: tuple[float, ...]
    unstable: bool
    # tokens/s of every successful attempt at this point, oldest first
    repeats: tuple[float, ...]

    @property
    def window_spread(self) -> float:
        return spread.relative_spread(self.window_rates)

    @property
    def reserved_bytes(self) -> int | None:
        memory = self.result.memory
        return None if memory is None or memory.measurement is None else memory.measurement.reserved_bytes


@dataclass
class Campaign:
    path: Path
    manifest: Manifest
    points: dict[tuple[str, int], Measured] = field(default_factory=dict)
    # curve -> batch -> the kind of the counted attempt's outcome, where it has a result
    outcomes: dict[str, dict[int, str]] = field(default_factory=dict)
    hashes: list[tuple[str, str]] = field(default_factory=list)
    # The manifest's worker, then every other worker a result names: a test worker's
    # results are of the real shape, so only these names tell them from measurements.
    workers: list[str] = field(default_factory=list)
    # The test worker this campaign's audit allowed, "" if none (or not audited).
    audit_test_worker: str = ""

    @property
    def optimizer(self) -> bool:
        return self.manifest.kind == "optimizer-timing"

    @property
    def spot_check(self) -> bool:
        return self.manifest.spot_check is not None

    def curves(self) -> list[str]:
        return self.manifest.curves()

    def first_oom(self, curve: str) -> int | None:
        return min((b for b, kind in self.outcomes.get(curve, {}).items() if kind == "cuda_oom"), default=None)

    def rates(self) -> list[PointRate]:
        return [
            PointRate(p.curve, p.batch, p.rate, p.window_rates, p.unstable, p.reserved_bytes, p.repeats)
            for p in self.points.values()
        ]

    def window_spread(self) -> float:
        return campaign_noise(self.rates())[0]

    def run_to_run(self) -> float | None:
        return campaign_noise(self.rates())[1]


def load(path: Path, label: str, *, audited: bool = True) -> Campaign:
    """Decode a campaign's manifest, audit and attempts; every refusal is one line.

    `audited=False` only for a spot check comparing itself with its source when its last
    point ends: its own audit comes after, and reads that comparison."""
    try:
        return _load(Path(path), label, audited)
    except OSError as exc:
        # A folder the reader cannot list (permissions, a vanished mount) is bad input too.
        raise Refused(
            f"{label} {path}: cannot read {exc.filename or path} ({exc.strerror or exc}); check the folder's permissions"
        ) from None


def _load(path: Path, label: str, audited: bool) -> Campaign:
    if not (path / MANIFEST).is_file():
        raise Refused(
            f"{label} {path}: not a campaign folder (no {MANIFEST}); give the folder `throughput-sweep run --output` made"
        )
    hashes: list[tuple[str, str]] = []

    def take(file: FileRead):
        if file.error:
            raise Refused(f"{label}: {file.error}; restore the file or re-run the point")
        assert file.data is not None, "read_file returns the bytes whenever it names no error"
        hashes.append((str(file.path), sha256_bytes(file.data)))
        return file.record

    manifest: Manifest = take(read_file(path / MANIFEST))
    allowed = _check_audit(path, label, manifest, hashes) if audited else ""
    campaign = Campaign(
        path=path, manifest=manifest, hashes=hashes, workers=[manifest.worker], audit_test_worker=allowed
    )
    rates: dict[tuple[str, int], list[float]] = {}
    read: list[tuple[AttemptFiles, dict[str, Any]]] = []
    for folder in attempt_folders(path):
        files = read_attempt(folder, (SETTLEMENT, RESULT, BASELINE))
        records = {name: take(file) for name, file in files.files.items()}
        for record in (records.get(RESULT), records.get(BASELINE)):
            if record is not None and record.worker.module not in campaign.workers:
                campaign.workers.append(record.worker.module)
        read.append((files, records))
        result = records.get(RESULT)
        rated = _rated(result, records.get(BASELINE) if campaign.optimizer else result)
        if rated is not None and rated.throughput is not None:
            key = (curve_name(files.model, files.context_length), files.batch_size)
            rates.setdefault(key, []).append(rated.throughput.tokens_per_second)
    counted = counting_attempts(
        read,
        point=lambda fr: (curve_name(fr[0].model, fr[0].context_length), fr[0].batch_size),
        number=lambda fr: fr[0].attempt,
        void=lambda fr: is_void(
            intent=(fr[0].path / INTENT).is_file(),
            receipt=(fr[0].path / RECEIPT).is_file(),
            result=RESULT in fr[1],
            settlement=fr[1].get(SETTLEMENT),
        ),
    )
    for (curve, batch), (files, records) in counted.items():
        result = records.get(RESULT)
        if result is None:
            continue
        campaign.outcomes.setdefault(curve, {})[batch] = outcome_kind(result.outcome)
        source = _rated(result, records.get(BASELINE) if campaign.optimizer else result)
        if source is None or source.throughput is None:
            continue
        campaign.points[(curve, batch)] = Measured(
            curve=curve,
            batch=batch,
            attempt=files.attempt,
            result=source,
            rate=source.throughput.tokens_per_second,
            window_rates=tuple(source.throughput.window_tokens_per_second),
            unstable=source.throughput.unstable,
            repeats=(),
        )
    for key, point in campaign.points.items():
        campaign.points[key] = replace(point, repeats=tuple(rates[key]))
    return campaign


def _rated(result: WorkerResult | None, source: WorkerResult | None) -> WorkerResult | None:
    """The record the attempt's rate comes from (the baseline, when optimizer), where it and the
    result are ok and it measured a rate; else None."""
    if result is None or source is None or source.throughput is None:
        return None
    return source if outcome_kind(result.outcome) == "ok" and outcome_kind(source.outcome) == "ok" else None


def _check_audit(path: Path, label: str, manifest: Manifest, hashes: list[tuple[str, str]]) -> str:
    """Refuses an unaudited or failed campaign; returns the test worker its audit allowed."""
    file = read_file(path / AUDIT)
    fix = f"run `throughput-audit --output {path}` first"
    if file.data is None:
        raise Refused(f"{label} {path}: not audited (no {AUDIT}); {fix}")
    try:
        audit = msgspec.json.decode(file.data, type=AuditReport)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refused(f"{label} {path / AUDIT}: not an audit record ({exc}); {fix}") from None
    if audit.kind != manifest.kind:
        raise Refused(
            f"{label} {path / AUDIT}: audits a {audit.kind} campaign, the manifest says {manifest.kind}; {fix}"
        )
    if audit.summary.failed:
        raise Refused(
            f"{label} {path}: its audit records {audit.summary.failed} failed checks; "
            f"fix what {AUDIT} names and re-run `throughput-audit --output {path}`"
        )
    hashes.append((str(file.path), sha256_bytes(file.data)))
    return audit.test_worker


__all__ = ["Campaign", "Measured", "Refused", "load"]
