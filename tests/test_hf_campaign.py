"""A campaign of a Hugging Face config.json on the local scheduler, with the scripted worker:
`run --models PATH/config.json` converts it, freezes its recipe and the file's sha256,
and --dry-run, status, collect, the audit and resume work with it as with a preset."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from campaign_helpers import scripted_run, sweep, write_plan
from throughput_audit.audit import run_audit
from throughput_schema import Manifest, Recipe, read
from throughput_schema.recipe import load_recipe, parameter_count

pytestmark = pytest.mark.slow  # a whole campaign on the local scheduler

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "packages/throughput-schema/tests/hf_configs/SmolLM2-135M/config.json"
CURVE = "SmolLM2-135M-c128"


def test_a_config_json_runs_as_a_model(tmp_path):
    config = tmp_path / "SmolLM2-135M" / "config.json"
    config.parent.mkdir()
    shutil.copyfile(SOURCE, config)
    out = tmp_path / "camp"
    plan = write_plan(tmp_path, {f"{CURVE}-b4": "cuda_oom"}, ok_seconds=0.05)
    run = scripted_run(out, 128, profile="local", models=(config,))

    dry = sweep(*run, "--dry-run", plan=plan)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"model SmolLM2-135M: converted from {config}" in dry.stdout and f"{CURVE}" in dry.stdout
    assert not out.exists()

    done = sweep(*run, plan=plan)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = read(out / "manifest.json", Manifest)
    assert manifest.models == ["SmolLM2-135M"]
    source = manifest.model_sources["SmolLM2-135M"]
    assert (source.path, source.sha256) == (str(config), hashlib.sha256(config.read_bytes()).hexdigest())
    frozen = read(out / "frozen/recipes/SmolLM2-135M.json", Recipe)
    assert frozen == load_recipe(config) and parameter_count(frozen.model) == 134_515_008
    result = json.loads((out / f"curves/{CURVE}/b1/attempt-1/result.json").read_text())
    assert result["recipe"]["model"]["n_kv_heads"] == 3 and result["parameters"] == 134_515_008

    status = sweep("status", "--output", out)
    assert status.returncode == 0 and CURVE in status.stdout, status.stdout + status.stderr
    collect = sweep("collect", "--output", out)
    assert collect.returncode == 0 and CURVE in (out / "results.json").read_text(), collect.stderr
    failed = [
        c.message for c in run_audit(out, settle_seconds=0, allow_test_worker=True).report.checks if c.status == "fail"
    ]
    assert failed == []

    again = sweep(*run, "--resume", plan=plan)
    assert again.returncode == 0, again.stdout + again.stderr
    config.write_text(config.read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 31'))
    changed = sweep(*run, "--resume", plan=plan)
    assert changed.returncode == 2 and "changed since this campaign converted it" in changed.stderr
    assert len(changed.stderr.strip().splitlines()) == 1
    # An optimizer follow-up measures the model its parent froze, whatever the file says now.
    follow = sweep(*scripted_run(tmp_path / "opt", profile="local", timing_from=out), plan=plan)
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert read(tmp_path / "opt/frozen/recipes/SmolLM2-135M.json", Recipe) == frozen
    assert read(tmp_path / "opt/manifest.json", Manifest).model_sources == manifest.model_sources
