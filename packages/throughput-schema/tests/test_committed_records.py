"""Campaign records committed to the repository read, and write back, as they were written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from throughput_schema.codec import decode, dumps
from throughput_schema.records import Manifest, Receipt, WorkerRequest, WorkerResult

ROOT = Path(__file__).resolve().parents[3]
ENERGY = ROOT / "packages/tiny-llm/benchmarks/results/h200-20261204-energy/energy-campaign"
POINT = ENERGY / "curves/20m-c512/b4/attempt-1"
# The worked examples, frozen by older code, and a campaign frozen by today's.
RECORDS = [(path, Manifest) for path in sorted((ROOT / "docs/examples").glob("*/*/manifest.json"))] + [
    (ENERGY / "manifest.json", Manifest),
    (POINT / "result.json", WorkerResult),
    (POINT / "receipt.json", Receipt),
    (POINT / "request.json", WorkerRequest),
]


@pytest.mark.parametrize("path, type_", RECORDS, ids=[str(p.relative_to(ROOT)) for p, _ in RECORDS])
def test_a_committed_record_writes_back_every_field_it_has(path, type_):
    raw = path.read_bytes()
    on_disk = json.loads(raw)
    written = json.loads(dumps(decode(raw, type_, source=str(path))))
    assert _kept(on_disk, written) == on_disk


def _kept(on_disk: object, written: object) -> object:
    """`written` cut to the fields `on_disk` has, at every depth: a field added since the
    record was written comes back with its default; none may be lost or changed."""
    if isinstance(on_disk, dict) and isinstance(written, dict):
        return {key: _kept(value, written.get(key)) for key, value in on_disk.items()}
    if isinstance(on_disk, list) and isinstance(written, list) and len(on_disk) == len(written):
        return [_kept(a, b) for a, b in zip(on_disk, written, strict=True)]
    return written


def test_the_committed_records_are_there():
    assert len(RECORDS) == 8
