"""Reading the campaigns a report is built from, and the exact bytes it read.

Every file the report decodes is hashed here, once, from the same bytes that were
decoded, so `inputs.sha256` names exactly what the figures were drawn from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from throughput_schema.codec import SchemaError, decode
from throughput_schema.layout import (
    BASELINE,
    BURSTS,
    CURVES,
    INTENT,
    MANIFEST,
    RECEIPT,
    RESULT,
    parse_curve_name,
)
from throughput_schema.records import BurstSample, Manifest, Receipt, SubmissionIntent, WorkerResult


class Refused(Exception):
    """The inputs cannot make a report; the message is one line naming the campaigns."""


@dataclass(frozen=True)
class Attempt:
    """One attempt folder of one point, decoded."""

    path: Path
    model: str
    context: int
    batch: int
    attempt: int
    result: WorkerResult | None
    baseline: WorkerResult | None
    # Raw burst samples from bursts.jsonl; None when the file is absent.
    bursts: list[BurstSample] | None

    @property
    def curve(self) -> str:
        return f"{self.model}-c{self.context}"

    @property
    def where(self) -> str:
        return f"{self.curve} b{self.batch} attempt-{self.attempt}"


@dataclass
class Campaign:
    """A campaign as the report read it: manifest, attempts and the hash of every file."""

    path: Path
    manifest: Manifest
    manifest_sha256: str
    attempts: list[Attempt]
    # (path as shown to the user, SHA-256) for every file read, manifest first.
    hashes: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.path)

    def curves(self) -> list[str]:
        return [f"{m}-c{c}" for m in self.manifest.models for c in self.manifest.contexts]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SchemaError(f"{path}: file not found") from None
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read ({exc.strerror})") from None


def load_campaign(path: Path) -> Campaign:
    """Decode a campaign's manifest and every attempt; raises SchemaError for a bad file."""
    path = Path(path)
    if not path.is_dir():
        raise Refused(f"{path}: not a campaign directory (no such folder)")
    if not (path / MANIFEST).is_file():
        raise Refused(f"{path}: not a campaign directory (no {MANIFEST})")
    hashes: list[tuple[str, str]] = []

    def take(file: Path, type_):
        data = _read_bytes(file)
        hashes.append((str(file), sha256_bytes(data)))
        return decode(data, type_, source=str(file))

    manifest = take(path / MANIFEST, Manifest)
    manifest_sha = hashes[0][1]
    attempts: list[Attempt] = []
    root = path / CURVES
    for curve_dir in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            model, context = parse_curve_name(curve_dir.name)
        except ValueError:
            continue
        if not curve_dir.is_dir():
            continue
        for batch_dir in sorted(curve_dir.iterdir()):
            if not (batch_dir.is_dir() and batch_dir.name[:1] == "b" and batch_dir.name[1:].isdigit()):
                continue
            for attempt_dir in sorted(batch_dir.iterdir()):
                name = attempt_dir.name
                if not (attempt_dir.is_dir() and name.startswith("attempt-") and name[8:].isdigit()):
                    continue
                # Intents and receipts are read (and hashed) only to prove they decode.
                for extra, type_ in ((INTENT, SubmissionIntent), (RECEIPT, Receipt)):
                    if (attempt_dir / extra).is_file():
                        take(attempt_dir / extra, type_)
                result = take(attempt_dir / RESULT, WorkerResult) if (attempt_dir / RESULT).is_file() else None
                baseline = (
                    take(attempt_dir / BASELINE, WorkerResult) if (attempt_dir / BASELINE).is_file() else None
                )
                bursts = _read_bursts(attempt_dir / BURSTS, hashes) if (attempt_dir / BURSTS).is_file() else None
                attempts.append(
                    Attempt(
                        path=attempt_dir,
                        model=model,
                        context=context,
                        batch=int(batch_dir.name[1:]),
                        attempt=int(name[8:]),
                        result=result,
                        baseline=baseline,
                        bursts=bursts,
                    )
                )
    attempts.sort(key=lambda a: (a.model, a.context, a.batch, a.attempt))
    return Campaign(path=path, manifest=manifest, manifest_sha256=manifest_sha, attempts=attempts, hashes=hashes)


def _read_bursts(file: Path, hashes: list[tuple[str, str]]) -> list[BurstSample]:
    data = _read_bytes(file)
    hashes.append((str(file), sha256_bytes(data)))
    out = []
    for number, line in enumerate(data.splitlines(), start=1):
        if line.strip():
            out.append(decode(line, BurstSample, source=f"{file}:{number}"))
    return out
