"""`python -m tiny_llm cpu-rate`: the real update timed on this machine's CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from throughput_schema.recipe import flops_per_token, load_recipe

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the probe answers cuda")
def test_the_rate_is_the_recipes_flops_over_its_timed_update():
    argv = [sys.executable, "-m", "tiny_llm", "cpu-rate", "--config", str(ROOT / "configs/tiny.yaml"), "--threads", "1"]
    answer = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert answer["device"] == "cpu" and answer["threads"] == 1
    assert answer["backend"] in ("cpu-eager", "cpu-eager-fp32") and answer["updates"] >= 2
    flops = flops_per_token(load_recipe(ROOT / "configs/tiny.yaml").model) * 128
    assert answer["flops_per_second"] == pytest.approx(flops / answer["seconds_per_update"])
