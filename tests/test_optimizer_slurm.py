"""Optimizer-timing follow-ups through the real local Slurm with the scripted worker.

One throughput campaign (20m at 512 and 1024: fitting 1, 2 and 1, 2, 4) is remeasured by a
sequential and a parallel follow-up; each runs to completion through real sbatch, the
first after an unexpected CUDA OOM that blocks only its curve, the second after a failure
that pauses only its curve until `--resume --retry-failed`. The parent's files never
change, every point keeps baseline.json, result.json and bursts.jsonl, and
`throughput-audit` passes on every campaign. A single-context parent is inherited exactly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from optimizer_campaigns import (
    audit,
    collect,
    fitting,
    local_profile,
    optimizer_campaign,
    pair,
    plan_file,
    resume_retry,
    snapshot,
    status,
    throughput_campaign,
)
from throughput_schema import WorkerResult, outcome_kind, read
from throughput_schema.curve_names import parse_curve_name
from throughput_schema.layout import decode_bursts

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]

PARENT_PLAN = {"20m-c512-b4": "cuda_oom", "20m-c1024-b8": "cuda_oom"}
GRID = {"20m-c512": [1, 2], "20m-c1024": [1, 2, 4]}


@pytest.fixture(scope="module")
def parent(local_slurm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parent")
    camp = throughput_campaign(tmp / "throughput", plan_file(tmp, PARENT_PLAN), local_profile(tmp))
    assert fitting(camp) == GRID
    return camp, snapshot(camp)


def points(campaign: Path) -> dict[tuple[str, int], list[str]]:
    """(curve, batch) -> the attempt folders present."""
    out: dict[tuple[str, int], list[str]] = {}
    for a in sorted(campaign.glob("curves/*/b*/attempt-*")):
        out.setdefault((a.parents[1].name, int(a.parent.name[1:])), []).append(a.name)
    return out


def kind(result: WorkerResult) -> str:
    return outcome_kind(result.outcome)


def assert_point_files(folder: Path) -> None:
    """baseline.json (uninstrumented, ok), result.json (instrumented) and bursts.jsonl equal to its bursts."""
    base, res = read(folder / "baseline.json", WorkerResult), read(folder / "result.json", WorkerResult)
    assert base.mode == "throughput" and base.optimizer_timing is None and base.calibration is not None
    assert res.mode == "optimizer-timing" and res.recipe == base.recipe
    bursts = decode_bursts((folder / "bursts.jsonl").read_bytes())
    assert bursts == res.optimizer_timing.bursts
    for i, w in enumerate(res.windows):
        assert sum(b.updates for b in bursts if b.window == i) == w.updates


def assert_audit_passes(campaign: Path) -> dict:
    proc = audit(campaign)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout and "the scheduler's accounting checked" in proc.stdout
    return json.loads((campaign / "audit.json").read_text())


def test_sequential_follow_up_unexpected_oom_blocks_only_its_curve_then_completes(parent, tmp_path):
    root, before = parent
    plan = plan_file(
        tmp_path,
        {
            **PARENT_PLAN,
            "20m-c1024-b2@1:optimizer": "cuda_oom",  # the parent fitted b2: an OOM here is unexpected
            "20m-c512-b1:optimizer": "optimizer_unstable",  # optimizer CV > 5%: ten windows, flagged
            "20m-c512-b2:optimizer": {"outcome": "ok", "slowdown": 1.08},  # instrumented wall time +8%
        },
    )
    profile = local_profile(tmp_path)
    opt = tmp_path / "optimizer"
    optimizer_campaign(root, opt, plan, profile, blocked=True)
    manifest = json.loads((opt / "manifest.json").read_text())
    assert manifest["kind"] == "optimizer-timing" and not manifest["parallel_points"]
    assert manifest["inherited_batches"] == fitting(root) == GRID
    text = status(opt)
    assert "20m-c512           complete" in text and "20m-c1024          blocked" in text
    assert "cuda_oom" in text
    # The blocked curve stops at its OOM: b4 is never submitted; the other curve is whole.
    assert points(opt) == {
        ("20m-c512", 1): ["attempt-1"],
        ("20m-c512", 2): ["attempt-1"],
        ("20m-c1024", 1): ["attempt-1"],
        ("20m-c1024", 2): ["attempt-1"],
    }
    oom = opt / "curves/20m-c1024/b2/attempt-1"
    assert kind(read(oom / "result.json", WorkerResult)) == "cuda_oom"
    assert kind(read(oom / "baseline.json", WorkerResult)) == "ok" and not (oom / "bursts.jsonl").exists()

    resume_retry(opt, plan)
    assert "20m-c1024          complete" in status(opt)
    assert (oom / "result.json").exists()  # the failed attempt is kept; the retry is a fresh folder
    for (curve, batch), attempts in points(opt).items():
        assert batch in GRID[curve]
        assert_point_files(opt / "curves" / curve / f"b{batch}" / attempts[-1])
    assert points(opt)[("20m-c1024", 2)] == ["attempt-1", "attempt-2"]
    receipts = [json.loads(p.read_text()) for p in opt.glob("curves/*/b*/attempt-*/receipt.json")]
    assert len(receipts) == 6 and all(r["accounting_final"] for r in receipts)

    collect(opt)
    readme = (opt / "README.md").read_text()
    assert not readme.startswith("**INCOMPLETE**") and "## Optimizer time" in readme and "wall change > 5%" in readme
    for png in ("optimizer-time.png", "optimizer-share.png", "throughput.png", "memory.png"):
        assert (opt / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    rows = {(r["curve"], r["batch_size"]): r for r in json.loads((opt / "optimizer.json").read_text())["points"]}
    assert sorted(rows) == sorted((c, b) for c, bs in GRID.items() for b in bs)
    with open(opt / "optimizer.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 5
    for (curve, batch), row in rows.items():
        folder = opt / "curves" / curve / f"b{batch}" / f"attempt-{row['attempt']}"
        base = read(folder / "baseline.json", WorkerResult)
        res = read(folder / "result.json", WorkerResult)
        context = parse_curve_name(curve)[1]
        base_ms = 1000.0 * batch * context / base.throughput.tokens_per_second
        assert row["optimizer_percent"] == pytest.approx(100.0 * res.optimizer_timing.optimizer_ms / base_ms, rel=1e-12)
        assert row["flag_unstable"] == ((curve, batch) == ("20m-c512", 1))
        assert row["flag_wall_change_over_5pct"] == ((curve, batch) == ("20m-c512", 2))
    assert len(read(opt / "curves/20m-c512/b1/attempt-1/result.json", WorkerResult).windows) == 10

    assert snapshot(root) == before, "the parent campaign changed"
    report = assert_audit_passes(opt)
    assert {c["curve"]: c["state"] for c in report["curves"]} == {"20m-c512": "complete", "20m-c1024": "complete"}


def test_parallel_follow_up_failure_pauses_only_its_curve_until_retried(parent, tmp_path):
    root, before = parent
    # Two jobs at a time: both curves' b1 start together; the failed b1 pauses its curve,
    # so its b2 and b4 wait while the other curve goes on.
    plan = plan_file(tmp_path, {"20m-c1024-b1@1:optimizer": "nonfinite"})
    data = json.loads(plan.read_text())
    data["ok_seconds"] = 1.5  # the failure ends well before the other curve's first point
    plan.write_text(json.dumps(data))
    profile = local_profile(tmp_path, name="local-slurm-two", max_concurrent_jobs=2)
    par = tmp_path / "parallel"
    optimizer_campaign(root, par, plan, profile, parallel=True, blocked=True)
    manifest = json.loads((par / "manifest.json").read_text())
    assert manifest["parallel_points"] and manifest["inherited_batches"] == GRID
    text = status(par)
    assert "20m-c512           complete" in text and "20m-c1024          blocked" in text and "nonfinite" in text
    assert points(par) == {
        ("20m-c512", 1): ["attempt-1"],
        ("20m-c512", 2): ["attempt-1"],
        ("20m-c1024", 1): ["attempt-1"],
    }

    resume_retry(par, plan)
    assert "20m-c1024          complete" in status(par)
    assert points(par)[("20m-c1024", 1)] == ["attempt-1", "attempt-2"]
    for (curve, batch), attempts in points(par).items():
        assert_point_files(par / "curves" / curve / f"b{batch}" / attempts[-1])
    # Resume keeps every point's receipt, the failed attempt's included.
    receipts = sorted(p.parent.relative_to(par).as_posix() for p in par.glob("curves/*/b*/attempt-*/receipt.json"))
    assert len(receipts) == 6 and "curves/20m-c1024/b1/attempt-1" in receipts

    collect(par)
    rows = json.loads((par / "optimizer.json").read_text())["points"]
    assert sorted((r["curve"], r["batch_size"]) for r in rows) == sorted((c, b) for c, bs in GRID.items() for b in bs)
    assert all(not r["flag_unstable"] and not r["flag_wall_change_over_5pct"] for r in rows)

    assert snapshot(root) == before, "the parent campaign changed"
    report = assert_audit_passes(par)
    peak = next(c for c in report["checks"] if c["name"] == "slurm.peak_concurrency")
    assert peak["status"] == "pass" and peak["values"]["peak"] <= 2
    assert_audit_passes(root)  # the parent itself, audited last (the audit writes audit.json into it)


def test_single_context_parent_is_inherited_exactly(local_slurm, tmp_path):
    parent, child = pair(tmp_path, contexts=(512,), parallel=True)
    assert fitting(parent) == {"20m-c512": [1, 2]}
    manifest = json.loads((child / "manifest.json").read_text())
    assert manifest["contexts"] == [512] and manifest["inherited_batches"] == {"20m-c512": [1, 2]}
    assert "20m-c512           complete" in status(child)
    assert_audit_passes(child)
