"""Where a campaign keeps its files, and a reader that loads them as records.

    runs/<name>/
      manifest.json
      frozen/...                                  package source, driver, configs, uv.lock
      curves/<model>-c<context>/b<batch>/attempt-<k>/
          intent.json receipt.json job.sh result.json baseline.json bursts.jsonl slurm-<id>.out

Everything a later command needs is in these files, so `status`, `--resume`, the
audit and the report all start from `load_attempts`. Nothing here writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from throughput_schema.codec import read
from throughput_schema.records import BurstSample, Manifest, Receipt, SubmissionIntent, WorkerResult

MANIFEST = "manifest.json"
FROZEN = "frozen"
CURVES = "curves"
INTENT = "intent.json"
RECEIPT = "receipt.json"
JOB_SCRIPT = "job.sh"
RESULT = "result.json"
BASELINE = "baseline.json"
BURSTS = "bursts.jsonl"
REQUEST = "request.json"  # the attempt's WorkerRequest, written before job.sh and the intent

_CURVE = re.compile(r"^(?P<model>[A-Za-z0-9_.]+)-c(?P<context>[1-9][0-9]*)$")
_BATCH = re.compile(r"^b(?P<batch>[1-9][0-9]*)$")
_ATTEMPT = re.compile(r"^attempt-(?P<attempt>[1-9][0-9]*)$")


def curve_name(model: str, context_length: int) -> str:
    return f"{model}-c{context_length}"


def parse_curve_name(name: str) -> tuple[str, int]:
    match = _CURVE.match(name)
    if not match:
        raise ValueError(f"not a curve folder name: {name!r} (expected MODEL-cCONTEXT)")
    return match["model"], int(match["context"])


def bursts_path(output: str | Path) -> Path:
    """Where a worker writing `output` keeps its raw burst samples.

    Beside the result, in the same folder: `bursts.jsonl` when the result is named
    `result.json` (the campaign layout), else `<output stem>.bursts.jsonl`, so two
    results written into one folder never share a bursts file.
    """
    output = Path(output)
    return output.with_name(BURSTS if output.name == RESULT else f"{output.stem}.{BURSTS}")


def encode_bursts(bursts: list[BurstSample]) -> bytes:
    """One BurstSample JSON object per line (the content of `bursts.jsonl`)."""
    return b"".join(msgspec.json.encode(b) + b"\n" for b in bursts)


def decode_bursts(data: bytes) -> list[BurstSample]:
    """The samples of a `bursts.jsonl` (blank lines ignored); raises msgspec errors on a bad line."""
    decoder = msgspec.json.Decoder(BurstSample)
    return [decoder.decode(line) for line in data.splitlines() if line.strip()]


def point_dir(campaign: Path, model: str, context_length: int, batch_size: int) -> Path:
    return Path(campaign) / CURVES / curve_name(model, context_length) / f"b{batch_size}"


def attempt_dir(campaign: Path, model: str, context_length: int, batch_size: int, attempt: int) -> Path:
    return point_dir(campaign, model, context_length, batch_size) / f"attempt-{attempt}"


@dataclass(frozen=True)
class Attempt:
    """The files of one attempt at one point; any of them may be absent."""

    path: Path
    model: str
    context_length: int
    batch_size: int
    attempt: int
    intent: SubmissionIntent | None
    receipt: Receipt | None
    result: WorkerResult | None
    baseline: WorkerResult | None

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context_length)


def load_manifest(campaign: Path) -> Manifest:
    return read(Path(campaign) / MANIFEST, Manifest)


def load_attempt(path: Path) -> Attempt:
    model, context = parse_curve_name(path.parent.parent.name)
    batch = int(_BATCH.match(path.parent.name)["batch"])
    number = int(_ATTEMPT.match(path.name)["attempt"])

    def opt(name: str, type_: type):
        file = path / name
        return read(file, type_) if file.exists() else None

    return Attempt(
        path=path,
        model=model,
        context_length=context,
        batch_size=batch,
        attempt=number,
        intent=opt(INTENT, SubmissionIntent),
        receipt=opt(RECEIPT, Receipt),
        result=opt(RESULT, WorkerResult),
        baseline=opt(BASELINE, WorkerResult),
    )


def load_attempts(campaign: Path) -> list[Attempt]:
    """Every attempt folder of a campaign, ordered by curve, batch and attempt.

    Malformed files raise `SchemaError` naming the file; folders whose names do not
    follow the layout are ignored (a user's notes beside the data are harmless).
    """
    root = Path(campaign) / CURVES
    found = []
    if not root.is_dir():
        return found
    for curve in root.iterdir():
        if not (curve.is_dir() and _CURVE.match(curve.name)):
            continue
        for batch in curve.iterdir():
            if not (batch.is_dir() and _BATCH.match(batch.name)):
                continue
            for attempt in batch.iterdir():
                if attempt.is_dir() and _ATTEMPT.match(attempt.name):
                    found.append(load_attempt(attempt))
    found.sort(key=lambda a: (a.model, a.context_length, a.batch_size, a.attempt))
    return found
