"""The campaign reader: every file's bytes, record and decode error, without raising."""

from __future__ import annotations

import pytest

from throughput_schema import BurstSample, Ok, Receipt, SchemaError, Settlement, WorkerResult, write_atomic
from throughput_schema.layout import (
    BURSTS,
    JOB_SCRIPT,
    RECEIPT,
    RESULT,
    SETTLEMENT,
    attempt_dir,
    attempt_folders,
    encode_bursts,
    load_attempts,
    read_attempt,
    stray_curves,
)
from throughput_schema.recipe import recipe_from_dict
from throughput_schema.records import WorkerIdentity

RECIPE = recipe_from_dict(
    {
        "name": "tiny",
        "model": {"n_layers": 2, "d_model": 128, "n_heads": 2, "ffn_dim": 320, "context_length": 128},
        "training": {"micro_batch_size": 2, "batch_tokens": 256},
    }
)
BURST = BurstSample(window=0, updates=3, wall_seconds=0.1, graph_ms=30.0, optimizer_ms=2.0)


def test_each_file_comes_with_its_bytes_its_record_or_its_error(tmp_path):
    folder = attempt_dir(tmp_path, "tiny", 128, 2, 1)
    write_atomic(
        folder / RESULT,
        WorkerResult(outcome=Ok(), recipe=RECIPE, parameters=1, worker=WorkerIdentity(module="tiny_llm")),
    )
    write_atomic(folder / RECEIPT, b'{"token": "t"')
    write_atomic(folder / JOB_SCRIPT, "#!/bin/bash\n")
    write_atomic(folder / SETTLEMENT, Settlement(token="t", state="refused", reason="r", decided_at="x"))
    write_atomic(folder / BURSTS, encode_bursts([BURST]) + b"{not json}\n")

    files = read_attempt(folder)

    assert (files.model, files.context_length, files.batch_size, files.attempt) == ("tiny", 128, 2, 1)
    assert list(files.files) == [RECEIPT, SETTLEMENT, JOB_SCRIPT, RESULT, BURSTS]
    result = files.files[RESULT]
    assert result.error is None and result.record.parameters == 1
    assert result.data == (folder / RESULT).read_bytes()
    assert files.files[JOB_SCRIPT].data == b"#!/bin/bash\n" and files.files[JOB_SCRIPT].record is None
    assert files.record(SETTLEMENT).state == "refused"
    assert str(folder / RECEIPT) in files.files[RECEIPT].error
    assert f"{folder / BURSTS}: line 2" in files.files[BURSTS].error
    with pytest.raises(SchemaError, match="receipt.json"):
        files.decoded()


def test_only_the_files_asked_for_are_read(tmp_path):
    folder = attempt_dir(tmp_path, "tiny", 128, 1, 1)
    write_atomic(folder / RECEIPT, Receipt(token="t", job_id="1", submitted_at="x", scheduler="local"))
    write_atomic(folder / BURSTS, b"{not json}\n")
    files = read_attempt(folder, (RECEIPT,))
    assert list(files.files) == [RECEIPT] and files.errors() == []


def test_folders_are_walked_in_name_order_and_strays_are_named(tmp_path):
    for batch, attempt in ((1, 1), (16, 1), (2, 1), (2, 2)):
        attempt_dir(tmp_path, "tiny", 128, batch, attempt).mkdir(parents=True)
    (tmp_path / "curves" / "notes").mkdir()
    (tmp_path / "curves" / "tiny-c128" / "b0").mkdir()

    assert [f"{p.parent.name}/{p.name}" for p in attempt_folders(tmp_path)] == [
        "b1/attempt-1",
        "b16/attempt-1",
        "b2/attempt-1",
        "b2/attempt-2",
    ]
    assert stray_curves(tmp_path) == ["notes"]
    assert [(a.batch_size, a.attempt) for a in load_attempts(tmp_path)] == [(1, 1), (2, 1), (2, 2), (16, 1)]
