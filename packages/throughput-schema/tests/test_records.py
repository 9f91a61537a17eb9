"""Round trips, strict rejection with the field named, versioning, JSON Schema export."""

from __future__ import annotations

import json

import msgspec
import pytest

from throughput_schema import (
    SCHEMA_VERSION,
    CudaOom,
    Manifest,
    Ok,
    Receipt,
    SchemaError,
    SubmissionIntent,
    Timeout,
    Window,
    WorkerResult,
    decode,
    dumps,
    read,
    write_atomic,
)
from throughput_schema.cli import json_schemas, main
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.layout import parse_curve_name
from throughput_schema.outcomes import outcome_kind
from throughput_schema.recipe import recipe_from_dict
from throughput_schema.records import (
    RECORD_TYPES,
    ClusterProfile,
    PointSpec,
    Protocol,
    Recipe,
    WorkerIdentity,
    unknown_field,
)


def tiny_recipe():
    return recipe_from_dict(
        {
            "name": "tiny",
            "model": {"n_layers": 2, "d_model": 128, "n_heads": 2, "ffn_dim": 320, "context_length": 128},
            "training": {"micro_batch_size": 2, "batch_tokens": 256},
        }
    )


def sample_result(outcome=Ok()) -> WorkerResult:
    return WorkerResult(
        worker=WorkerIdentity(module="tiny_llm"),
        outcome=outcome,
        recipe=tiny_recipe(),
        parameters=1234,
        windows=[Window(updates=20, seconds=1.5, counter_after=45), Window(updates=20, seconds=1.25, counter_after=65)],
    )


@pytest.mark.parametrize(
    "outcome", [Ok(), CudaOom(phase="capture", message="tried to allocate"), Timeout(deadline_seconds=780.0)]
)
def test_worker_result_round_trips_with_its_outcome(outcome):
    result = sample_result(outcome)
    again = decode(dumps(result), WorkerResult)
    assert again == result
    assert type(again.outcome) is type(outcome)
    assert json.loads(dumps(result))["outcome"]["kind"] == outcome_kind(outcome)


def test_every_record_kind_round_trips():
    profile = ClusterProfile(name="local-slurm", scheduler="slurm", account="throughput", partition="gpu")
    point = PointSpec(model="250m", context_length=2048, batch_size=16, attempt=2)
    records = [
        point,
        SubmissionIntent(
            token="t1",
            campaign="c",
            point=point,
            script_sha256="ab",
            created_at="2026-01-01T00:00:00Z",
            scheduler="slurm",
        ),
        Receipt(
            token="t1",
            job_id="17",
            submitted_at="2026-01-01T00:00:01Z",
            scheduler="slurm",
            accounting=JobAccounting(job_id="17", state="completed"),
        ),
        Manifest(
            kind="throughput",
            name="c",
            created_at="now",
            models=["20m"],
            contexts=[512],
            protocol=Protocol(),
            profile=profile,
            tool_version="0.1.0",
        ),
    ]
    for record in records:
        assert decode(dumps(record), type(record)) == record
    assert point.curve == "250m-c2048"


def test_malformed_field_is_named():
    data = json.loads(dumps(sample_result()))
    data["windows"][1]["seconds"] = "fast"
    with pytest.raises(SchemaError, match=r"result.json: .*\$\.windows\[1\]\.seconds"):
        decode(json.dumps(data), WorkerResult, source="result.json")


def test_constraint_violation_is_named():
    data = json.loads(dumps(sample_result()))
    data["windows"][0]["updates"] = 0
    with pytest.raises(SchemaError, match=r"\$\.windows\[0\]\.updates"):
        decode(json.dumps(data), WorkerResult)


def test_unknown_outcome_kind_is_rejected():
    data = json.loads(dumps(sample_result()))
    data["outcome"] = {"kind": "exploded"}
    with pytest.raises(SchemaError, match="exploded"):
        decode(json.dumps(data), WorkerResult)


def test_truncated_json_says_so():
    with pytest.raises(SchemaError, match="truncated"):
        decode(dumps(sample_result())[:40], WorkerResult, source="x.json")


def test_newer_schema_version_is_refused_with_upgrade_hint():
    data = json.loads(dumps(sample_result()))
    data["schema_version"] = SCHEMA_VERSION + 1
    data["a_field_from_the_future"] = {"nested": True}
    with pytest.raises(SchemaError, match="newer than this tool"):
        decode(json.dumps(data), WorkerResult)


def test_older_reader_skips_unknown_fields_also_inside_embedded_configs():
    # A newer writer added a metric and a recipe field (with defaults, same schema version).
    data = json.loads(dumps(sample_result()))
    data["extra_metric"] = 3
    data["recipe"]["model"]["a_knob_from_the_future"] = True
    result = decode(json.dumps(data), WorkerResult)
    assert result.parameters == 1234 and result.recipe == sample_result().recipe
    profile = decode(json.dumps({"name": "x", "scheduler": "slurm", "qos": "high"}), ClusterProfile)
    assert profile.scheduler == "slurm"


def test_unknown_field_names_a_users_typo_where_it_is_and_what_is_accepted():
    assert unknown_field({"name": "x", "scheduler": "slurm", "account": "a"}, ClusterProfile) is None
    assert unknown_field({"name": "x", "acount": "a"}, ClusterProfile).startswith(
        "unknown field `acount` at `$`; ClusterProfile fields are name, scheduler, account,"
    )
    recipe = msgspec.to_builtins(tiny_recipe())
    assert unknown_field(recipe, Recipe) is None
    recipe["model"]["context_lenght"] = 2048
    message = unknown_field(recipe, Recipe)
    assert message.startswith("unknown field `context_lenght` at `$.model`; ModelConfig fields are n_layers,")
    assert "schema_version" not in unknown_field({"x": 1}, Recipe)


def test_missing_field_gets_default_for_schema_evolution():
    minimal = {
        "outcome": {"kind": "ok"},
        "recipe": msgspec.to_builtins(tiny_recipe()),
        "parameters": 1,
        "worker": {"module": "tiny_llm"},
    }
    result = decode(json.dumps(minimal), WorkerResult)
    assert result.schema_version == SCHEMA_VERSION and result.windows == []


def test_a_result_naming_no_worker_is_refused_with_the_upgrade_that_names_it(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    path = tmp_path / "curves" / "m-c8" / "b1" / "attempt-1" / "result.json"
    path.parent.mkdir(parents=True)
    minimal = {"outcome": {"kind": "ok"}, "recipe": msgspec.to_builtins(tiny_recipe()), "parameters": 1}
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **minimal}))
    with pytest.raises(SchemaError) as refused:
        read(path, WorkerResult)
    assert str(refused.value) == (
        f"{path}: Object missing required field `worker`, written by older tools; "
        f"rewrite its campaign once with `throughput-schema upgrade {tmp_path}`"
    )


def test_write_atomic_replaces_whole_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "deep" / "result.json"
    write_atomic(path, sample_result())
    write_atomic(path, sample_result(CudaOom(phase="setup")))
    assert isinstance(read(path, WorkerResult).outcome, CudaOom)
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_read_missing_file_is_one_line(tmp_path):
    with pytest.raises(SchemaError, match="file not found"):
        read(tmp_path / "nope.json", WorkerResult)


def test_json_schema_export_covers_every_record(tmp_path, capsys):
    schemas = json_schemas()
    assert set(schemas) == set(RECORD_TYPES) | {"worker-request"}
    assert "deadline_seconds" in json.dumps(schemas["worker-request"])
    outcome_kinds = json.dumps(schemas["worker-result"])
    for kind in (
        "ok",
        "cuda_oom",
        "timeout",
        "host_oom",
        "compile_error",
        "nonfinite",
        "crashed",
        "cancelled",
        "node_fail",
        "storage_full",
        "capped",
    ):
        assert f'"{kind}"' in outcome_kinds
    assert main(["export", "--output", str(tmp_path / "schemas")]) == 0
    assert len(list((tmp_path / "schemas").glob("*.schema.json"))) == len(schemas)
    write_atomic(tmp_path / "r.json", sample_result())
    assert main(["validate", "worker-result", str(tmp_path / "r.json")]) == 0
    (tmp_path / "bad.json").write_text('{"outcome": {"kind": "ok"}}')
    assert main(["validate", "worker-result", str(tmp_path / "bad.json")]) == 1
    assert "missing required field" in capsys.readouterr().err


def test_a_manifest_names_its_curves_and_each_name_parses_back():
    profile = ClusterProfile(name="local", scheduler="local")
    manifest = Manifest(
        kind="throughput",
        name="c",
        created_at="now",
        models=["20m", "250m"],
        contexts=[512, 4096],
        protocol=Protocol(),
        profile=profile,
        tool_version="0.1.0",
    )
    assert manifest.curves() == ["20m-c512", "20m-c4096", "250m-c512", "250m-c4096"]
    assert [parse_curve_name(name) for name in manifest.curves()] == [
        ("20m", 512),
        ("20m", 4096),
        ("250m", 512),
        ("250m", 4096),
    ]
    for bad in ("20m", "20m-c0", "20m-c", "-c512", "20m-c512/x"):
        with pytest.raises(ValueError, match="not a curve folder name"):
            parse_curve_name(bad)


def test_audit_report_is_a_record_the_writer_and_the_reader_share(tmp_path, capsys):
    from throughput_schema import AuditReport, AuditSummary, Check, CurveFinding

    report = AuditReport(
        audit_version=2,
        campaign="/c",
        name="c",
        kind="throughput",
        audited_at="2026-01-01T00:00:00+00:00",
        tool_version="0.1.0",
        scheduler_accounting="not_applicable",
        summary=AuditSummary(passed=1, failed=0, not_applicable=1),
        curves=[CurveFinding(curve="20m-c512", state="bounded", batches=[1, 2], first_oom_batch=2)],
        checks=[
            Check(name="slurm", status="not_applicable"),
            Check(name="a", status="pass", file="f", values={"z": 1, "a": 2}),
        ],
    )
    # The audit encodes with msgspec's plain encoder: fields in declared order, a check's
    # and a curve's defaults left out, a check's values in the order the audit gave them.
    data = msgspec.json.encode(report)
    assert data.startswith(b'{"audit_version":2,"campaign":"/c","name":"c","kind":"throughput","audited_at"')
    assert b'"curves":[{"curve":"20m-c512","state":"bounded","batches":[1,2],"first_oom_batch":2}]' in data
    assert (
        b'"checks":[{"name":"slurm","status":"not_applicable"},{"name":"a","status":"pass","file":"f","values":{"z":1,"a":2}}]'
        in data
    )
    assert data.endswith(b'"test_worker":"","notes":[]}')
    assert decode(data, AuditReport) == report
    (tmp_path / "audit.json").write_bytes(data)
    assert main(["validate", "audit-report", str(tmp_path / "audit.json")]) == 0
    (tmp_path / "audit.json").write_bytes(data.replace(b'"status":"pass"', b'"status":"maybe"'))
    assert main(["validate", "audit-report", str(tmp_path / "audit.json")]) == 1
    assert "status" in capsys.readouterr().err
