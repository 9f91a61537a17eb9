"""Spot checks on the CPU (local scheduler, scripted worker): the sample is seeded and
always holds each curve's recommended batch; re-measuring an unchanged campaign passes
its audit; re-measuring it 10% faster fails it; bad requests are refused with one line
and nothing written. Also the batch recommendation in status and collect."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from campaign_helpers import scripted_run, sweep
from throughput_audit.audit import run_audit, write_outputs
from throughput_schema.provenance import allowed_worker_banner
from throughput_sweep.campaign import open_campaign
from throughput_sweep.exit_statuses import EXIT_COMPLETE, EXIT_SPOT_CHECK_FAILED
from throughput_sweep.spot_check import sample

pytestmark = pytest.mark.slow  # whole campaigns and their spot checks

ROOT = Path(__file__).resolve().parents[3]
# 20m-c512 fits 1 2 4 8 (OOM at 16), 20m-c1024 fits 1 2 4 (OOM at 8): 7 fitting points.
OOMS = {"20m-c512-b16": "cuda_oom", "20m-c1024-b8": "cuda_oom"}


def write_plan(path: Path, **extra) -> Path:
    path.write_text(
        json.dumps({"default": "ok", "ok_seconds": 0.05, "points": {**OOMS, **extra.pop("points", {})}, **extra})
    )
    return path


# Each command here must exit 0 unless the test names another status (rc=...).
run = functools.partial(sweep, rc=0)


def audit(root: Path):
    outcome = run_audit(root, slurm_checks=False, settle_seconds=0, allow_test_worker=True)
    write_outputs(root, outcome)
    return outcome.report


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A, a complete and audited throughput campaign."""
    base = tmp_path_factory.mktemp("spot")
    a = base / "A"
    run(*scripted_run(a, 512, 1024, profile="local", poll_max=1), plan=write_plan(base / "plan.json"))
    assert audit(a).summary.failed == 0
    return a


def spot_check(a: Path, out: Path, *extra, plan: Path, rc: int | None = 0):
    return run(
        "run",
        "--spot-check-from",
        a,
        "--output",
        out,
        "--poll-max-seconds",
        "1",
        "--no-progress",
        *extra,
        plan=plan,
        rc=rc,
    )


def test_recommendation_in_status_and_collect(source):
    status = run("status", "--output", source, plan=write_plan(source.parent / "p0.json")).stdout
    assert "    recommended: batch " in status and "first OOM at 16" in status and "first OOM at 8" in status
    written = run("collect", "--output", source, plan=write_plan(source.parent / "p0.json")).stdout
    assert "results.json" in written
    curves = json.loads((source / "results.json").read_text())["curves"]
    for c in curves:
        r = c["recommendation"]
        assert r["recommended_batch"] in r["equally_fast"] and r["fastest_batch"] == c["fastest_stable_batch"]
        assert r["first_oom_batch"] == c["first_oom_batch"] and r["headroom_bytes"] > 0
    readme = (source / "README.md").read_text()
    assert (
        "| recommended |" in readme
        and "Recommended batches. Batches whose rate is within the noise threshold" in readme
    )


def test_sample_is_seeded_and_always_holds_the_recommended_batches(source):
    curves = open_campaign(source).curves()
    for seed in range(12):
        chosen, recommended = sample(curves, 4, seed)
        assert chosen == sample(curves, 4, seed)[0]  # reproducible
        assert sum(map(len, chosen.values())) == 4
        assert set(recommended) == {"20m-c512", "20m-c1024"}
        assert all(recommended[c] in chosen[c] for c in recommended)
        assert all(set(bs) <= set(next(c for c in curves if c.name == name).fitting) for name, bs in chosen.items())
    assert len({json.dumps(sample(curves, 4, seed)[0]) for seed in range(12)}) > 1  # the seed matters
    # A dry run shows the same sample a real run would measure.
    plan = write_plan(source.parent / "p1.json")
    one = spot_check(source, source.parent / "dry", "--points", "4", "--seed", "3", "--dry-run", plan=plan).stdout
    chosen, _ = sample(curves, 4, 3)
    for batches in chosen.values():
        assert f"(inherited batches {' '.join(map(str, batches))})" in one
    assert not (source.parent / "dry").exists()


def test_spot_check_of_an_unchanged_campaign_passes_its_audit(source, tmp_path):
    b = tmp_path / "B"
    spot_check(source, b, "--points", "3", "--seed", "7", plan=write_plan(tmp_path / "plan.json"))
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["spot_check"]["points"] == 3 and manifest["spot_check"]["seed"] == 7
    assert manifest["frozen_files"] == json.loads((source / "manifest.json").read_text())["frozen_files"]
    # It compiles each point again, independently: it neither loads A's compiled updates nor keeps its own.
    for result in b.glob("curves/*/*/attempt-*/result.json"):
        cache = json.loads(result.read_text())["compile_cache"]
        assert cache["state"] == "off" and cache["artifact"] == "", cache
    assert not (b / "compiled").exists() and any((source / "compiled").iterdir())
    comparison = json.loads((b / "spot-check" / "comparison.json").read_text())
    assert comparison["spot_check"] and len(comparison["points"]) == 3
    assert {p["verdict"] for p in comparison["points"]} == {"same"} and comparison["differences"] == []
    # A's audit allowed its test worker; the spot check re-ran it, so its comparison says so.
    assert comparison["test_worker"] == allowed_worker_banner("scripted_worker")
    md = (b / "spot-check" / "comparison.md").read_text()
    assert md.startswith(f"**{allowed_worker_banner('scripted_worker')}**")
    assert "B: a spot check of a sample (no boundary re-measured): A's recommendation stands" in md
    assert "first OOM at none" not in md
    status = run("status", "--output", b, plan=tmp_path / "plan.json", rc=EXIT_COMPLETE).stdout
    assert f"spot check of {source}: 3 points, seed 7: PASSED" in status
    run("collect", "--output", b, plan=tmp_path / "plan.json")
    assert (
        f"A spot check of `{source}`: its comparison with that campaign is in `spot-check/`."
        in (b / "README.md").read_text()
    )
    report = audit(b)
    assert report.summary.failed == 0, [c.message for c in report.checks if c.status == "fail"]
    assert {c.name for c in report.checks} >= {"spot_check.grid", "spot_check.within_noise", "spot_check.recommended"}


def test_spot_check_ten_percent_faster_fails_its_audit(source, tmp_path):
    b = tmp_path / "B"
    ran = spot_check(
        source, b, "--points", "3", plan=write_plan(tmp_path / "plan.json", rate=1.1), rc=EXIT_SPOT_CHECK_FAILED
    )
    assert "the spot check FAILED" in ran.stderr and "FAILED: 3 of 3 points" in ran.stdout
    comparison = json.loads((b / "spot-check" / "comparison.json").read_text())
    assert {p["verdict"] for p in comparison["points"]} == {"faster"}
    assert all(p["ratio"] == pytest.approx(1.1) for p in comparison["points"])
    status = run("status", "--output", b, plan=tmp_path / "plan.json", rc=EXIT_SPOT_CHECK_FAILED)
    assert "FAILED: 3 of 3 points changed beyond the noise threshold" in status.stdout
    report = audit(b)
    failed = [c for c in report.checks if c.status == "fail"]
    assert {c.name for c in failed} == {"spot_check.within_noise"} and len(failed) == 3
    assert "faster, against the stated noise threshold" in failed[0].message


def test_unaudited_spot_check_without_comparison_fails_its_audit(source, tmp_path):
    b = tmp_path / "B"
    spot_check(source, b, "--points", "2", plan=write_plan(tmp_path / "plan.json"))
    (b / "spot-check" / "comparison.json").unlink()
    failed = [c for c in audit(b).checks if c.status == "fail"]
    assert [c.name for c in failed] == ["spot_check.comparison"] and "--resume" in failed[0].message


@pytest.mark.parametrize(
    "args, words",
    [
        (["--points", "0"], "--points: 0 must be"),
        (["--points", "8"], "--points 8: "),
        (["--points", "1"], "ask for at least 2"),
        (["--points", "3", "--windows", "3"], "with A's protocol"),
        ([], "--spot-check-from A and --points N go together"),
    ],
)
def test_bad_requests_are_refused_with_one_line(source, tmp_path, args, words):
    out = tmp_path / "B"
    r = spot_check(source, out, *args, plan=write_plan(tmp_path / "plan.json"), rc=2)
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line and words in line, line
    assert not out.exists()


def test_sources_that_cannot_be_spot_checked_are_refused(source, tmp_path):
    plan = write_plan(tmp_path / "plan.json")
    out = tmp_path / "B"
    cases = [(tmp_path / "nowhere", "no such campaign folder")]
    unaudited = tmp_path / "unaudited"
    run(*scripted_run(unaudited, 512, profile="local", poll_max=1), plan=plan)
    cases.append((unaudited, "not audited"))
    blocked = tmp_path / "blocked"
    run(
        *scripted_run(blocked, 512, profile="local", poll_max=1),
        plan=write_plan(tmp_path / "blocked.json", points={"20m-c512-b4": "compile_error"}),
        rc=3,
    )
    cases.append((blocked, "the campaign is not complete (20m-c512 blocked); finish it first"))
    spot = tmp_path / "spot"
    spot_check(source, spot, "--points", "2", plan=plan)
    cases.append((spot, "a spot check; spot-check a throughput campaign"))
    for a, words in cases:
        r = spot_check(a, out, "--points", "2", plan=plan, rc=2)
        line = r.stderr.strip()
        assert len(line.splitlines()) == 1 and words in line, line
        assert not out.exists()
