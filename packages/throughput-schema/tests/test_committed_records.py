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
EXAMPLES = sorted((ROOT / "docs/examples").glob("*/*/manifest.json"))


def _round_trip(path: Path, type_: type) -> tuple[dict, dict]:
    raw = path.read_bytes()
    return json.loads(raw), json.loads(dumps(decode(raw, type_, source=str(path))))


@pytest.mark.parametrize(
    "path, type_",
    [
        (ENERGY / "manifest.json", Manifest),
        (POINT / "result.json", WorkerResult),
        (POINT / "receipt.json", Receipt),
        (POINT / "request.json", WorkerRequest),
    ],
    ids=lambda x: x.name if isinstance(x, Path) else "",
)
def test_a_campaign_frozen_by_todays_code_writes_back_field_for_field(path, type_):
    on_disk, written = _round_trip(path, type_)
    assert written == on_disk


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.parent.relative_to(ROOT / "docs/examples")))
def test_the_worked_examples_keep_every_field_they_have(path):
    on_disk, written = _round_trip(path, Manifest)
    # Fields added since these campaigns were frozen come back with their defaults.
    assert {key: written[key] for key in on_disk} == on_disk


def test_the_worked_examples_are_there():
    assert len(EXAMPLES) == 4
