"""Optimizer follow-ups on the CPU: the primary percentage and flags from constructed
results checked against hand-derived numbers, the exact inherited grid of a
single-context parent, and the refusals of an incomplete parent (local scheduler, scripted worker)."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from campaign_helpers import scripted_run, sweep
from throughput_audit.audit import run_audit
from throughput_schema import BurstSample, OptimizerTiming, Throughput, Window, WorkerResult
from throughput_schema.layout import Attempt
from throughput_schema.outcomes import Ok
from throughput_schema.recipe import load_recipe, parameter_count
from throughput_schema.records import WorkerIdentity
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.collect import optimizer_row

pytestmark = pytest.mark.slow  # whole campaigns and their follow-ups

ROOT = Path(__file__).resolve().parents[3]


# Each command here must exit 0 unless the test names another status (rc=...).
run = functools.partial(sweep, rc=0)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def result(tokens_per_second: float, *, timing: OptimizerTiming | None = None, unstable: bool = False) -> WorkerResult:
    recipe = load_recipe(
        ROOT / "configs" / "20m.yaml",
        ["model.context_length=512", "training.micro_batch_size=4", "training.batch_tokens=2048"],
    )
    return WorkerResult(
        worker=WorkerIdentity(module="tiny_llm"),
        outcome=Ok(),
        recipe=recipe,
        parameters=parameter_count(recipe.model),
        mode="optimizer-timing" if timing else "throughput",
        windows=[Window(updates=20, seconds=20 * 2048 / tokens_per_second)] * 3,
        throughput=Throughput(
            tokens_per_second=tokens_per_second,
            sequences_per_second=tokens_per_second / 512,
            window_tokens_per_second=[tokens_per_second] * 3,
            cv=0.0,
            unstable=unstable,
            update_ms=1000.0 * 2048 / tokens_per_second,
        ),
        optimizer_timing=timing,
    )


def info(baseline: WorkerResult, instrumented: WorkerResult) -> AttemptInfo:
    attempt = Attempt(
        path=Path("curves/20m-c512/b4/attempt-1"),
        model="20m",
        context_length=512,
        batch_size=4,
        attempt=1,
        intent=None,
        receipt=None,
        result=instrumented,
        baseline=baseline,
    )
    return AttemptInfo(attempt=attempt, optimizer=True)


def timing(window_ms: list[float], *, unstable: bool = False) -> OptimizerTiming:
    bursts = [
        BurstSample(window=i, updates=20, wall_seconds=0.4, graph_ms=19.0, optimizer_ms=ms)
        for i, ms in enumerate(window_ms)
    ]
    return OptimizerTiming(
        bursts=bursts,
        window_optimizer_ms=window_ms,
        window_graph_ms=[19.0] * 3,
        optimizer_ms=sorted(window_ms)[1],
        optimizer_cv=0.0,
        share_of_wall=0.1,
        share_of_graph=0.1,
        unstable=unstable,
    )


def test_primary_percentage_and_flags_by_hand():
    # Baseline: 2048 tokens per update at 102,400 tokens/s -> 20.0 ms per update.
    # Instrumented: 96,603.77 tokens/s -> 21.2 ms per update: wall time +6% (> 5%: flagged).
    # Window optimizer ms 2.5, 2.0, 3.0 -> median 2.5 -> 2.5 / 20.0 = 12.5% of the baseline update.
    row = optimizer_row(info(result(102_400.0), result(2048 / 0.0212, timing=timing([2.5, 2.0, 3.0]))))
    assert row["baseline_update_ms"] == pytest.approx(20.0)
    assert row["optimizer_ms"] == pytest.approx(2.5)
    assert row["optimizer_percent"] == pytest.approx(12.5)
    assert row["wall_change"] == pytest.approx(0.06)
    assert row["flag_wall_change_over_5pct"] is True and row["flag_unstable"] is False

    # +4% wall time is not flagged; remaining optimizer instability is.
    row = optimizer_row(info(result(102_400.0), result(2048 / 0.0208, timing=timing([4.0, 5.0, 3.0], unstable=True))))
    assert row["optimizer_percent"] == pytest.approx(100 * 4.0 / 20.0)
    assert row["wall_change"] == pytest.approx(0.04) and row["flag_wall_change_over_5pct"] is False
    assert row["flag_unstable"] is True
    # An unstable baseline flags the point too.
    row = optimizer_row(info(result(102_400.0, unstable=True), result(102_400.0, timing=timing([2.5, 2.0, 3.0]))))
    assert row["flag_unstable"] is True and row["wall_change"] == pytest.approx(0.0)


def write_plan(path: Path, points: dict) -> Path:
    path.write_text(json.dumps({"default": "ok", "ok_seconds": 0.05, "points": points}))
    return path


def test_single_context_parent_is_inherited_exactly(tmp_path):
    plan = write_plan(tmp_path / "plan.json", {"20m-c512-b4": "cuda_oom"})
    parent = tmp_path / "parent"
    run(*scripted_run(parent, 512, poll_max=1), plan=plan)
    before = snapshot(parent)
    opt = tmp_path / "opt"
    run(*scripted_run(opt, timing_from=parent, poll_max=1), plan=plan)
    manifest = json.loads((opt / "manifest.json").read_text())
    assert manifest["contexts"] == [512] and manifest["inherited_batches"] == {"20m-c512": [1, 2]}
    assert sorted(p.name for p in (opt / "curves/20m-c512").iterdir()) == ["b1", "b2"]
    for b in (1, 2):
        folder = opt / f"curves/20m-c512/b{b}/attempt-1"
        assert {"baseline.json", "result.json", "bursts.jsonl"} <= {p.name for p in folder.iterdir()}
        # The parent compiled the point and saved it; both of the follow-up's workers load that.
        own = json.loads((parent / f"curves/20m-c512/b{b}/attempt-1/result.json").read_text())["compile_cache"]
        assert own["state"] == "cold" and own["artifact"].startswith("compiled/"), own
        for name in ("baseline.json", "result.json"):
            cache = json.loads((folder / name).read_text())["compile_cache"]
            assert cache["state"] == "warm" and cache["artifact"] == f"../parent/{own['artifact']}", cache
            assert cache["sha256"] == own["sha256"]
    assert not (opt / "compiled").exists()  # warm jobs save nothing
    # The audit finds each warm setup's artifact in the parent, intact and compiled for its point.
    report = run_audit(opt, slurm_checks=False, settle_seconds=0, allow_test_worker=True).report
    cache = [c for c in report.checks if c.name == "setup.cache"]
    assert len(cache) == 4 and {c.status for c in cache} == {"pass"}, [c.message for c in cache]
    assert "20m-c512           complete" in run("status", "--output", opt).stdout
    assert snapshot(parent) == before
    # Moved away from its parent, the follow-up's warm setups are still found in the parent's folder.
    moved = tmp_path / "moved" / "opt"
    moved.parent.mkdir()
    opt.rename(moved)
    report = run_audit(moved, slurm_checks=False, settle_seconds=0, allow_test_worker=True).report
    assert {c.status for c in report.checks if c.name == "setup.cache"} == {"pass"}


def test_incomplete_parent_is_refused_with_a_clear_message(tmp_path):
    plan = write_plan(tmp_path / "plan.json", {"20m-c512-b4": "cuda_oom", "20m-c1024-b2": "compile_error"})
    parent = tmp_path / "parent"
    run(*scripted_run(parent, 512, 1024, poll_max=1), plan=plan, rc=3)
    # 20m-c512 bounded (1, 2; OOM at 4), 20m-c1024 blocked at batch 2 (run's exit status 3)
    before = snapshot(parent)
    opt = tmp_path / "opt"
    for extra, words in (
        ([], "an optimizer follow-up needs"),
        (["--parallel-optimizer-points"], "--parallel-optimizer-points needs"),
    ):
        r = run(*scripted_run(opt, timing_from=parent, poll_max=1), *extra, plan=plan, rc=2)
        line = r.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert f"{words} a completed memory sweep" in line and "blocked curves (20m-c1024)" in line
        assert "--resume --retry-failed" in line
        assert not opt.exists()

    # A curve that has not ended (its last point removed: the sweep would go on) is refused in either mode.
    shutil.rmtree(parent / "curves/20m-c512/b4")
    for extra in ([], ["--parallel-optimizer-points"]):
        r = run(*scripted_run(opt, timing_from=parent, poll_max=1), *extra, plan=plan, rc=2)
        assert (
            "the throughput campaign is not complete" in r.stderr
            and "20m-c512" in r.stderr
            and "finish it first" in r.stderr
        )
        assert not opt.exists()
    after = snapshot(parent)  # nothing but the removed point changed
    assert after == {k: v for k, v in before.items() if not k.startswith("curves/20m-c512/b4/")}
