"""Every refusal: exit 2, one line naming the campaigns, no traceback, nothing written.
Every failed independent check: exit 1 with its message, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from campaign_builder import gpu as campaigns
from campaign_builder.files import rewrite
from throughput_report.cli import main
from throughput_schema import codec
from throughput_schema.records import Manifest, WorkerResult


def run(capsys, throughput, optimizer, out):
    argv = ["--throughput", *map(str, throughput), "--optimizer", *map(str, optimizer), "--output", str(out)]
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err.strip()


def refused(capsys, throughput, optimizer, out, *needles) -> str:
    code, err = run(capsys, throughput, optimizer, out)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("throughput-report: refused: ")
    for needle in needles:
        assert str(needle) in err, err
    assert not Path(out).exists()
    assert not [p for p in Path(out).parent.glob(".*partial*")]
    return err


def failed(capsys, throughput, optimizer, out, *needles) -> str:
    code, err = run(capsys, throughput, optimizer, out)
    assert code == 1, err
    assert len(err.splitlines()) == 1, err
    assert "check failed" in err
    for needle in needles:
        assert str(needle) in err, err
    assert not Path(out).exists()
    return err


def attempt(campaign: Path, curve: str, batch: int) -> Path:
    return campaign / "curves" / curve / f"b{batch}" / "attempt-1"


# ------------------------------------------------------------------------------ refusals


def test_different_counts(capsys, tmp_path, pair):
    other = campaigns.write_pair(tmp_path, "other", ["20m"], [2048])
    refused(
        capsys, [pair[0], other[0]], [pair[1]], tmp_path / "out", pair[0], other[0], pair[1], "paired by argument order"
    )


def test_context_overlap_between_pairs(capsys, tmp_path, pair):
    other = campaigns.write_pair(tmp_path, "other", ["20m"], [1024, 2048])
    refused(capsys, [pair[0], other[0]], [pair[1], other[1]], tmp_path / "out", "context 1024", pair[0], other[0])


def test_optimizer_parent_is_not_its_pair(capsys, tmp_path, pair):
    other = campaigns.write_pair(tmp_path, "other", ["20m"], [2048])
    # Swapped order: pair[1] was measured from pair[0], not from other[0].
    refused(
        capsys,
        [pair[0], other[0]],
        [other[1], pair[1]],
        tmp_path / "out",
        f"optimizer campaign {other[1]}",
        f"not from its pair {pair[0]}",
    )


def test_optimizer_parent_manifest_changed(capsys, tmp_path, pair):
    manifest = codec.read(pair[0] / "manifest.json", Manifest)
    codec.write_atomic(pair[0] / "manifest.json", msgspec.structs.replace(manifest, tool_version="9.9"))
    refused(capsys, [pair[0]], [pair[1]], tmp_path / "out", pair[1], pair[0], "manifest SHA-256 differs")


def test_campaign_kinds_swapped(capsys, tmp_path, pair):
    refused(capsys, [pair[1]], [pair[0]], tmp_path / "out", pair[1], "given to --throughput")


def test_throughput_curve_without_boundary(capsys, tmp_path, pair):
    top = campaigns.largest_fitting("90m", 1024)
    shutil.rmtree(attempt(pair[0], "90m-c1024", 2 * top).parent)
    refused(
        capsys,
        [pair[0]],
        [pair[1]],
        tmp_path / "out",
        f"throughput campaign {pair[0]}",
        "90m-c1024",
        "not ended by a confirmed CUDA OOM",
        "incomplete",
    )


def test_throughput_curve_ended_by_timeout(capsys, tmp_path, pair):
    top = campaigns.largest_fitting("20m", 512)
    codec.write_atomic(
        attempt(pair[0], "20m-c512", 2 * top) / "result.json", campaigns.timeout_result("20m", 512, 2 * top)
    )
    refused(capsys, [pair[0]], [pair[1]], tmp_path / "out", "20m-c512", "ended with timeout", "incomplete")


def test_optimizer_campaign_missing_an_inherited_point(capsys, tmp_path, pair):
    shutil.rmtree(attempt(pair[1], "20m-c1024", 8).parent)
    refused(
        capsys,
        [pair[0]],
        [pair[1]],
        tmp_path / "out",
        f"optimizer campaign {pair[1]}",
        "20m-c1024 b8",
        "has no result.json",
        "incomplete",
    )


def test_optimizer_point_without_baseline(capsys, tmp_path, pair):
    (attempt(pair[1], "90m-c512", 4) / "baseline.json").unlink()
    refused(capsys, [pair[0]], [pair[1]], tmp_path / "out", "90m-c512 b4", "has no baseline.json")


def test_optimizer_pair_from_two_gpus(capsys, tmp_path, pair):
    folder = attempt(pair[1], "20m-c1024", 2)
    for name, uuid in (("result.json", "GPU-aaaa"), ("baseline.json", "GPU-bbbb")):
        result = codec.read(folder / name, WorkerResult)
        rewrite(folder / name, WorkerResult, hardware=msgspec.structs.replace(result.hardware, gpu_uuid=uuid))
    refused(
        capsys,
        [pair[0]],
        [pair[1]],
        tmp_path / "out",
        "20m-c1024 b2",
        "baseline on GPU-bbbb",
        "instrumented worker on GPU-aaaa",
        "one GPU",
    )


@pytest.mark.slow  # writes a whole report first
def test_output_already_holds_a_report(capsys, tmp_path, pair):
    out = tmp_path / "out"
    assert run(capsys, [pair[0]], [pair[1]], out)[0] == 0
    before = (out / "report.pdf").read_bytes()
    code, err = run(capsys, [pair[0]], [pair[1]], out)
    assert code == 2
    assert f"output {out} already holds a report" in err and "choose a new output directory" in err
    assert (out / "report.pdf").read_bytes() == before


def test_output_inside_an_input_campaign(capsys, tmp_path, pair):
    refused(capsys, [pair[0]], [pair[1]], pair[0] / "report", "lies inside input campaign", pair[0])


def test_malformed_result_file(capsys, tmp_path, pair):
    path = attempt(pair[1], "20m-c512", 2) / "result.json"
    path.write_bytes(path.read_bytes()[:200])
    refused(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "not valid JSON")


def test_missing_campaign(capsys, tmp_path, pair):
    refused(capsys, [tmp_path / "nope"], [pair[1]], tmp_path / "out", tmp_path / "nope", "not a campaign directory")


# ------------------------------------------------------------------------ failed checks


def _rewrite_result(path: Path, **changes):
    rewrite(path, WorkerResult, **changes)


def test_check_parameter_count(capsys, tmp_path, pair):
    path = attempt(pair[0], "20m-c512", 4) / "result.json"
    result = codec.read(path, WorkerResult)
    _rewrite_result(path, parameters=result.parameters + 1)
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "parameters", "19,912,000")


def test_check_parameter_count_does_not_trust_the_schemas_formula(capsys, tmp_path, pair, monkeypatch):
    """Were the schema's formula wrong (here: without the final norm), every tool that calls it
    would agree with the wrong count the worker recorded; the report counts for itself."""
    from throughput_report import checks
    from throughput_schema import recipe

    right = recipe.parameter_count
    wrong = lambda m: right(m) - m.d_model  # noqa: E731
    monkeypatch.setattr(recipe, "parameter_count", wrong)
    monkeypatch.setattr(checks, "parameter_count", wrong, raising=False)  # where a copy was imported
    path = attempt(pair[0], "20m-c512", 4) / "result.json"
    result = codec.read(path, WorkerResult)
    _rewrite_result(path, parameters=recipe.parameter_count(result.recipe.model))
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "parameters 19,911,680", "19,912,000")


def test_check_window_rate(capsys, tmp_path, pair):
    path = attempt(pair[1], "90m-c1024", 2) / "baseline.json"
    result = codec.read(path, WorkerResult)
    rates = list(result.throughput.window_tokens_per_second)
    rates[1] *= 1.01
    _rewrite_result(path, throughput=msgspec.structs.replace(result.throughput, window_tokens_per_second=rates))
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "window 1 rate")


def test_check_median(capsys, tmp_path, pair):
    path = attempt(pair[0], "90m-c512", 8) / "result.json"
    result = codec.read(path, WorkerResult)
    tp = msgspec.structs.replace(result.throughput, tokens_per_second=max(result.throughput.window_tokens_per_second))
    _rewrite_result(path, throughput=tp)
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "median window rate")


def test_check_update_counter(capsys, tmp_path, pair):
    path = attempt(pair[0], "20m-c1024", 1) / "result.json"
    result = codec.read(path, WorkerResult)
    windows = list(result.windows)
    windows[2] = msgspec.structs.replace(windows[2], counter_after=windows[2].counter_after + 1)
    _rewrite_result(path, windows=windows)
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "optimizer counter after window 2")


def test_check_event_weighting(capsys, tmp_path, pair):
    path = attempt(pair[1], "20m-c512", 16) / "result.json"
    result = codec.read(path, WorkerResult)
    timing = result.optimizer_timing
    # An unweighted mean of the bursts instead of the update-weighted one.
    plain = [
        sum(b.optimizer_ms for b in timing.bursts if b.window == i) / sum(1 for b in timing.bursts if b.window == i)
        for i in range(len(result.windows))
    ]
    _rewrite_result(path, optimizer_timing=msgspec.structs.replace(timing, window_optimizer_ms=plain))
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", path, "weighted by updates")


def test_check_raw_bursts_match_result(capsys, tmp_path, pair):
    path = attempt(pair[1], "90m-c512", 2) / "bursts.jsonl"
    lines = path.read_bytes().splitlines()
    path.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", "bursts.jsonl differs")


def test_check_matching_configurations(capsys, tmp_path, pair):
    path = attempt(pair[1], "90m-c1024", 4) / "baseline.json"
    result = codec.read(path, WorkerResult)
    recipe = msgspec.structs.replace(
        result.recipe, optimizer=msgspec.structs.replace(result.recipe.optimizer, lr=0.002)
    )
    _rewrite_result(path, recipe=recipe)
    failed(capsys, [pair[0]], [pair[1]], tmp_path / "out", "90m-c1024 b4", "recipes differ")


def test_check_memory_boundary(capsys, tmp_path):
    # A campaign whose first OOM is not twice the largest fitting batch: b64 fits, b128 missing, b256 OOM.
    t = campaigns.write_throughput(tmp_path / "t", ["20m"], [2048], largest={("20m", 2048): 64})
    oom = attempt(t, "20m-c2048", 128)
    shutil.rmtree(oom.parent)
    codec.write_atomic(attempt(t, "20m-c2048", 256) / "result.json", campaigns.oom_result("20m", 2048, 256))
    o = campaigns.write_optimizer(tmp_path / "o", t)
    failed(capsys, [t], [o], tmp_path / "out", "first OOM b256", "twice the largest fitting batch b64")


def test_tokens_per_update_with_no_point(capsys, tmp_path, pair):
    argv = [
        "--throughput",
        str(pair[0]),
        "--optimizer",
        str(pair[1]),
        "--output",
        str(tmp_path / "out"),
        "--tokens-per-update",
        "3",
    ]
    assert main(argv) == 2
    assert "no fitting point has B·L = 3" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
