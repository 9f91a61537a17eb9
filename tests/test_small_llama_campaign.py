"""Presets named like public models (`smollm2-135m`, `qwen3-0.6b`: `-` and `.` in the name)
measured end to end on the local scheduler with the scripted worker: the dry run, the run,
status, collect, the audit with its parameter-count checks, an optimizer follow-up, the
report and compare, as for any preset."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import ROOT, sweep
from optimizer_campaigns import checked, collect, optimizer_campaign, plan_file, report, status, throughput_campaign
from throughput_audit.audit import run_audit, write_outputs
from throughput_schema import AuditReport, read
from throughput_schema.recipe import load_recipe, parameter_count

pytestmark = pytest.mark.slow  # whole campaigns on the local scheduler

MODELS = ("smollm2-135m", "qwen3-0.6b")
CURVES = sorted(f"{m}-c512" for m in MODELS)


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory) -> tuple[Path, Path]:
    """A throughput campaign of both models at context 512 (batch 2 runs out of memory) and its
    optimizer follow-up, both collected."""
    tmp = tmp_path_factory.mktemp("small-llamas")
    plan = plan_file(tmp, {f"{curve}-b2": "cuda_oom" for curve in CURVES})
    parent = throughput_campaign(tmp / "throughput", plan, "local", models=MODELS, contexts=(512,))
    child = tmp / "optimizer"
    optimizer_campaign(parent, child, plan, "local")
    collect(child)
    for campaign in (parent, child):  # audited, as compare asks
        write_outputs(campaign, run_audit(campaign, settle_seconds=0, allow_test_worker=True))
    return parent, child


def audited(campaign: Path):
    return run_audit(campaign, settle_seconds=0, allow_test_worker=True).report.checks


def test_dry_run_plans_the_curves_of_both_models(tmp_path):
    out = tmp_path / "dry"
    done = checked(
        sweep("run", "--dry-run", "--output", out, "--models", *MODELS, "--contexts", "512", "--profile", "local"),
        "dry run",
    )
    for curve in CURVES:
        assert curve in done.stdout
    assert not out.exists()


def test_campaign_runs_collects_and_audits_with_the_parameter_counts(campaigns):
    parent, child = campaigns
    for campaign in (parent, child):
        results = json.loads((campaign / "results.json").read_text())
        assert sorted(c["curve"] for c in results["curves"]) == sorted(CURVES)
        shown = status(campaign)
        assert all(curve in shown for curve in CURVES), shown
        checks = read(campaign / "audit.json", AuditReport).checks
        assert [c.message for c in checks if c.status == "fail"] == []
        for name in ("recipe.parameters", "throughput.flops_per_token"):
            assert sorted({c.file.split("/")[1] for c in checks if c.name == name}) == CURVES, name
    for model in MODELS:
        point = parent / f"curves/{model}-c512/b1/attempt-1/result.json"
        recorded = json.loads(point.read_text())["parameters"]
        assert recorded == parameter_count(load_recipe(ROOT / "configs" / f"{model}.yaml").model)


def test_a_wrong_parameter_count_in_a_result_fails_the_audit(campaigns, tmp_path):
    campaign = Path(shutil.copytree(campaigns[0], tmp_path / "throughput"))
    point = "curves/qwen3-0.6b-c512/b1/attempt-1/result.json"
    data = json.loads((campaign / point).read_text())
    # The count of the model without its q/k norm weights: what a model that dropped the knob would record.
    data["parameters"] -= 28 * 2 * 128
    (campaign / point).write_text(json.dumps(data, indent=2))
    failed = [(c.name, c.file) for c in audited(campaign) if c.status == "fail"]
    assert failed == [("recipe.parameters", point)]


def test_report_and_compare_take_the_campaigns(campaigns, tmp_path):
    parent, child = campaigns
    checked(report([parent], [child], tmp_path / "report"), "report")
    with open(tmp_path / "report/points.csv", newline="") as f:
        rows = {(r["model"], r["context"], r["parameters"]) for r in csv.DictReader(f)}
    counts = {m: parameter_count(load_recipe(ROOT / "configs" / f"{m}.yaml").model) for m in MODELS}
    assert rows == {(m, "512", str(counts[m])) for m in MODELS}
    again = Path(shutil.copytree(parent, tmp_path / "again"))
    compare = [sys.executable, "-m", "throughput_compare.cli", parent, again, "--output", tmp_path / "cmp"]
    done = subprocess.run(
        [*map(str, compare), "--allow-test-worker"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    checked(done, "compare")
    written = "".join(p.read_text() for p in (tmp_path / "cmp").rglob("*") if p.suffix in (".json", ".csv", ".md"))
    assert all(curve in written for curve in CURVES)
