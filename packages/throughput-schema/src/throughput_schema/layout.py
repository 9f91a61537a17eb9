"""Where a campaign keeps its files, and a reader that loads them as records.

    runs/<name>/
      manifest.json  watcher.lock
      frozen/...                                  package source, driver, configs, uv.lock
      curves/<model>-c<context>/closure.json       close-curve, when a person ended a blocked curve
      curves/<model>-c<context>/b<batch>/attempt-<k>/
          request.json job.sh intent.json receipt.json settlement.json result.json baseline.json
          bursts.jsonl <the job's output: its backend's job_log, slurm-<id>.out or local-<id>.out>
      results.json results.csv README.md *.png    collect
      audit.json accounting.txt                   the audit
      spot-check/comparison.{json,md,csv,pdf} ...  a spot check's comparison with its source
      .local-jobs/                                the local scheduler's job registry (`local_jobs`)
      compiled/<key>.bin <key>.json               compiled updates jobs reuse (`compile_cache`)

Everything a later command needs is in these files, so `status`, `--resume`, the
audit and the report all read them here: `read_attempt` gives each file's bytes, its
record and any decode error; `load_attempts` the records, raising on a malformed file.
Nothing here writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from throughput_schema.codec import CAMPAIGN_MANIFEST, SchemaError, decode, read
from throughput_schema.curve_names import curve_name, is_curve_name, parse_curve_name  # noqa: F401 (the layout's names)
from throughput_schema.records import (
    BurstSample,
    CurveClosure,
    Manifest,
    Receipt,
    Settlement,
    SubmissionIntent,
    WorkerResult,
)

MANIFEST = CAMPAIGN_MANIFEST
FROZEN = "frozen"
RECIPES = "recipes"  # frozen/recipes/<model>.json: the resolved preset of each model
CURVES = "curves"
LOCK = "watcher.lock"
# In each attempt folder.
INTENT = "intent.json"
RECEIPT = "receipt.json"
SETTLEMENT = "settlement.json"  # an intent settled without a receipt
JOB_SCRIPT = "job.sh"
RESULT = "result.json"
BASELINE = "baseline.json"
BURSTS = "bursts.jsonl"
REQUEST = "request.json"  # the attempt's WorkerRequest, written before job.sh and the intent


# In a curve's folder: a person's decision to end a blocked curve (close-curve).
CLOSURE = "closure.json"
# Written by `collect` at the campaign's top.
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
README = "README.md"
THROUGHPUT_PNG = "throughput.png"
MEMORY_PNG = "memory.png"
ENERGY_PNG = "energy.png"  # only where some point measured the GPU's energy
OPTIMIZER_JSON = "optimizer.json"
OPTIMIZER_CSV = "optimizer.csv"
OPTIMIZER_TIME_PNG = "optimizer-time.png"
OPTIMIZER_SHARE_PNG = "optimizer-share.png"
# Written by the audit at the campaign's top.
AUDIT = "audit.json"
ACCOUNTING = "accounting.txt"
# A comparison's files (`throughput-compare --output OUT` writes them into OUT).
COMPARISON_MD = "comparison.md"
COMPARISON_CSV = "comparison.csv"
COMPARISON_JSON = "comparison.json"
COMPARISON_PDF = "comparison.pdf"
# A spot check (`run --spot-check-from A`) writes its comparison with A into this folder
# at its campaign's top, when its last point has ended; its audit reads it there.
SPOT_CHECK = "spot-check"
# Compiled artifacts a later job of the same point loads instead of compiling
# (`throughput_schema.compile_cache`); optional files, never needed to read a campaign.
COMPILED = "compiled"


def compiled_dir(campaign: str | Path) -> Path:
    return Path(campaign) / COMPILED


def job_folders(root: Path, manifest: Manifest, parent: Path | None) -> tuple[Path | None, list[Path]]:
    """The folder a job of this campaign saves into and loads from, and those it only loads
    from (`parent`: where the parent campaign is found). Every point, retry and optimizer point
    shares the campaign's `compiled/`; an optimizer follow-up also loads its parent's, never
    writing there. A spot check has none: it re-measures its parent independently, compile included."""
    if manifest.spot_check is not None:
        return None, []
    if parent is None or manifest.parent is None or manifest.kind != "optimizer-timing":
        return compiled_dir(root), []
    return compiled_dir(root), [compiled_dir(parent)]


def spot_check_comparison(campaign: Path) -> Path:
    return Path(campaign) / SPOT_CHECK / COMPARISON_JSON


_BATCH = re.compile(r"^b(?P<batch>[1-9][0-9]*)$")
_ATTEMPT = re.compile(r"^attempt-(?P<attempt>[1-9][0-9]*)$")


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


def decode_bursts(data: bytes, source: str = BURSTS) -> list[BurstSample]:
    """The samples of a `bursts.jsonl` (blank lines ignored); a bad line raises
    `SchemaError` naming `source` and the line's number."""
    return [
        decode(line, BurstSample, source=f"{source}: line {number}")
        for number, line in enumerate(data.splitlines(), 1)
        if line.strip()
    ]


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

    @property
    def token(self) -> str:
        """The submission token, of an attempt whose intent is written (it is, before any
        submission: a receipt, a settlement or a job in flight all follow it)."""
        assert self.intent is not None, f"{self.path}: no submission intent, so no token"
        return self.intent.token


def is_void(*, intent: bool, receipt: bool, result: bool, settlement: Settlement | None) -> bool:
    """Nothing of the attempt reached the scheduler: it has no receipt and no result, and
    either no intent (the folder was made, the intent never written) or an intent settled
    as never submitted. `intent`, `receipt` and `result` say whether those files exist."""
    if receipt or result:
        return False
    return not intent or (settlement is not None and settlement.state == "never-submitted")


_A = TypeVar("_A")
_P = TypeVar("_P", bound=Hashable)


def counting_attempts(
    attempts: Iterable[_A], *, point: Callable[[_A], _P], number: Callable[[_A], int], void: Callable[[_A], bool]
) -> dict[_P, _A]:
    """Which attempt of a point counts: per point, the highest-numbered attempt that is not
    void (`is_void`), whatever it holds; a point whose attempts are all void has none.

    The sweep, the report and compare read a point through this rule; the audit derives
    it again on its own. Points come in the order their first counted attempt is met."""
    out: dict[_P, _A] = {}
    for attempt in attempts:
        if void(attempt):
            continue
        key = point(attempt)
        if key not in out or number(attempt) > number(out[key]):
            out[key] = attempt
    return out


# What an attempt folder may hold, in the order the reader reads it, and the record
# each JSON file decodes to (the job script is bytes only; bursts are a list of samples).
ATTEMPT_FILES = (INTENT, RECEIPT, SETTLEMENT, JOB_SCRIPT, RESULT, BASELINE, BURSTS)
_RECORDS: dict[str, type] = {
    MANIFEST: Manifest,
    INTENT: SubmissionIntent,
    RECEIPT: Receipt,
    SETTLEMENT: Settlement,
    RESULT: WorkerResult,
    BASELINE: WorkerResult,
    CLOSURE: CurveClosure,
}


@dataclass(frozen=True)
class FileRead:
    """One file as read: its bytes, the record they decode to, or why there is neither."""

    path: Path
    data: bytes | None = None
    record: Any = None
    error: str | None = None  # one line that names the file


@dataclass(frozen=True)
class AttemptFiles:
    """The files present in one attempt folder, by name, each read once."""

    path: Path
    model: str
    context_length: int
    batch_size: int
    attempt: int
    files: dict[str, FileRead]

    def record(self, name: str) -> Any:
        found = self.files.get(name)
        return None if found is None else found.record

    def errors(self, names: tuple[str, ...] = ATTEMPT_FILES) -> list[str]:
        return [f.error for n, f in self.files.items() if n in names and f.error]

    def decoded(self) -> Attempt:
        """The records as an `Attempt`; raises `SchemaError` for the first of them that did not decode."""
        errors = self.errors((INTENT, RECEIPT, RESULT, BASELINE))
        if errors:
            raise SchemaError(errors[0])
        return Attempt(
            path=self.path,
            model=self.model,
            context_length=self.context_length,
            batch_size=self.batch_size,
            attempt=self.attempt,
            intent=self.record(INTENT),
            receipt=self.record(RECEIPT),
            result=self.record(RESULT),
            baseline=self.record(BASELINE),
        )


def read_file(path: Path) -> FileRead:
    """A file's bytes and, for the campaign's record files, the record they decode to."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FileRead(path, error=f"{path}: file not found")
    except OSError as exc:
        return FileRead(path, error=f"{path}: cannot read ({exc.strerror})")
    try:
        if path.name == BURSTS:
            record = decode_bursts(data, str(path))
        elif path.name in _RECORDS:
            record = decode(data, _RECORDS[path.name], source=str(path))
        else:
            record = None
    except SchemaError as exc:
        return FileRead(path, data, error=str(exc))
    return FileRead(path, data, record)


def read_attempt(path: Path, names: tuple[str, ...] = ATTEMPT_FILES) -> AttemptFiles:
    """The files `names` that exist in the attempt folder `path`; none of them raises."""
    path = Path(path)
    model, context = parse_curve_name(path.parent.parent.name)
    return AttemptFiles(
        path=path,
        model=model,
        context_length=context,
        batch_size=_number(_BATCH, path.parent.name, "batch"),
        attempt=_number(_ATTEMPT, path.name, "attempt"),
        files={name: read_file(path / name) for name in names if (path / name).is_file()},
    )


def _number(pattern: re.Pattern[str], name: str, group: str) -> int:
    """The number in a batch or attempt folder's name; raises ValueError for any other name."""
    match = pattern.match(name)
    if not match:
        raise ValueError(f"not a {group} folder name: {name!r}")
    return int(match[group])


def attempt_folders(campaign: Path) -> list[Path]:
    """Every attempt folder of a campaign, in the order of their names (as `ls` lists them).

    Folders whose names do not follow the layout are passed over (a user's notes beside
    the data are harmless); `stray_curves` names those directly under `curves/`.
    """
    found: list[Path] = []
    root = Path(campaign) / CURVES
    for curve in sorted(root.iterdir()) if root.is_dir() else []:
        if not (curve.is_dir() and is_curve_name(curve.name)):
            continue
        for batch in sorted(curve.iterdir()):
            if not (batch.is_dir() and _BATCH.match(batch.name)):
                continue
            found += [a for a in sorted(batch.iterdir()) if a.is_dir() and _ATTEMPT.match(a.name)]
    return found


def stray_curves(campaign: Path) -> list[str]:
    """Folders under `curves/` whose names are not MODEL-cCONTEXT."""
    root = Path(campaign) / CURVES
    return sorted(c.name for c in root.iterdir() if c.is_dir() and not is_curve_name(c.name)) if root.is_dir() else []


def closure_path(campaign: Path, curve: str) -> Path:
    return Path(campaign) / CURVES / curve / CLOSURE


def load_closures(campaign: Path) -> dict[str, CurveClosure]:
    """Each closed curve's closure record, by curve name; a malformed one raises `SchemaError`."""
    root = Path(campaign) / CURVES
    found = sorted(root.glob(f"*/{CLOSURE}")) if root.is_dir() else []
    return {path.parent.name: read(path, CurveClosure) for path in found if is_curve_name(path.parent.name)}


def load_manifest(campaign: Path) -> Manifest:
    return read(Path(campaign) / MANIFEST, Manifest)


def load_attempt(path: Path) -> Attempt:
    return read_attempt(path, (INTENT, RECEIPT, RESULT, BASELINE)).decoded()


def load_attempts(campaign: Path) -> list[Attempt]:
    """Every attempt of a campaign, ordered by curve, batch and attempt; a malformed file
    raises `SchemaError` naming the file."""
    found = [load_attempt(folder) for folder in attempt_folders(campaign)]
    found.sort(key=lambda a: (a.model, a.context_length, a.batch_size, a.attempt))
    return found
