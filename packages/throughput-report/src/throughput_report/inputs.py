"""Reading the campaigns a report is built from, and the exact bytes it read.

Every file the report decodes is hashed here, once, from the same bytes that were
decoded, so `inputs.sha256` names exactly what the figures were drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from throughput_schema.codec import SchemaError
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import (
    BASELINE,
    BURSTS,
    INTENT,
    MANIFEST,
    RECEIPT,
    RESULT,
    SETTLEMENT,
    FileRead,
    attempt_folders,
    closure_path,
    curve_name,
    is_void,
    read_attempt,
    read_file,
)
from throughput_schema.records import BurstSample, CurveClosure, Manifest, Receipt, WorkerResult
from throughput_schema.setup_share import SetupShare, setup_share


class Refused(Exception):
    """The inputs cannot make a report; the message is one line naming the campaigns."""


@dataclass(frozen=True)
class ReportAttempt:
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
    void: bool = False  # nothing was submitted (`is_void`): the attempt never counts
    elapsed_seconds: float | None = None  # the scheduler's, from the receipt's accounting

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context)

    @property
    def measured(self) -> WorkerResult:
        """`result`, of an attempt kept for having one (a curve's finals, an optimizer point)."""
        assert self.result is not None, f"{self.where}: kept as measured without a result"
        return self.result

    @property
    def measured_baseline(self) -> WorkerResult:
        """`baseline`, of an optimizer point, which pairing refuses without one."""
        assert self.baseline is not None, f"{self.where}: an optimizer point without a baseline"
        return self.baseline

    @property
    def where(self) -> str:
        return f"{self.curve} b{self.batch} attempt-{self.attempt}"


@dataclass
class ReportCampaign:
    """A campaign as the report read it: manifest, attempts and the hash of every file."""

    path: Path
    manifest: Manifest
    manifest_sha256: str
    attempts: list[ReportAttempt]
    # (path as shown to the user, SHA-256) for every file read, manifest first.
    hashes: list[tuple[str, str]] = field(default_factory=list)
    # curve name -> a person's closure of that curve (close-curve)
    closures: dict[str, CurveClosure] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.path)

    def setup_share(self) -> SetupShare:
        return setup_share((a.elapsed_seconds, (a.result, a.baseline)) for a in self.attempts if not a.void)

    def curves(self) -> list[str]:
        return self.manifest.curves()


# Intents and receipts are read (and hashed) to prove they decode, and with a settlement
# to tell a void attempt, which never counts.
_READ = (INTENT, RECEIPT, SETTLEMENT, RESULT, BASELINE, BURSTS)


def load_campaign(path: Path) -> ReportCampaign:
    """Decode a campaign's manifest and every attempt; raises SchemaError for a bad file."""
    path = Path(path)
    if not path.is_dir():
        raise Refused(f"{path}: not a campaign directory (no such folder)")
    if not (path / MANIFEST).is_file():
        raise Refused(f"{path}: not a campaign directory (no {MANIFEST})")
    hashes: list[tuple[str, str]] = []

    def take(file: FileRead):
        if file.error:
            raise SchemaError(file.error)
        assert file.data is not None, "read_file returns the bytes whenever it names no error"
        hashes.append((str(file.path), sha256_bytes(file.data)))
        return file.record

    manifest = take(read_file(path / MANIFEST))
    manifest_sha = hashes[0][1]
    attempts: list[ReportAttempt] = []
    for folder in attempt_folders(path):
        files = read_attempt(folder, _READ)
        records = {name: take(file) for name, file in files.files.items()}
        attempts.append(
            ReportAttempt(
                path=folder,
                model=files.model,
                context=files.context_length,
                batch=files.batch_size,
                attempt=files.attempt,
                result=records.get(RESULT),
                baseline=records.get(BASELINE),
                bursts=records.get(BURSTS),
                elapsed_seconds=_elapsed(records.get(RECEIPT)),
                void=is_void(
                    intent=INTENT in records,
                    receipt=RECEIPT in records,
                    result=RESULT in records,
                    settlement=records.get(SETTLEMENT),
                ),
            )
        )
    attempts.sort(key=lambda a: (a.model, a.context, a.batch, a.attempt))
    closures = {
        name: take(read_file(closure_path(path, name)))
        for name in manifest.curves()
        if closure_path(path, name).exists()
    }
    return ReportCampaign(
        path=path, manifest=manifest, manifest_sha256=manifest_sha, attempts=attempts, hashes=hashes, closures=closures
    )


def _elapsed(receipt: Receipt | None) -> float | None:
    return receipt.accounting.elapsed_seconds if receipt is not None and receipt.accounting is not None else None
