"""`python -m tiny_llm describe` on each public small-Llama preset prints the model's published count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PUBLISHED = {
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "tinyllama-1.1b": 1_100_048_384,
    "llama-3.2-1b": 1_235_814_400,
    "qwen2.5-0.5b": 494_032_768,
    "qwen3-0.6b": 596_049_920,
    "smollm3-3b": 3_075_098_624,
    "olmo-2-1b": 1_484_916_736,
    "gemma-3-270m": 268_098_176,
    "gemma-3-1b": 999_885_952,
}


def test_describe_prints_each_public_presets_published_count():
    for preset, count in PUBLISHED.items():
        done = subprocess.run(
            [sys.executable, "-m", "tiny_llm", "describe", "--config", f"configs/{preset}.yaml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["parameters"] == count, preset


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_the_preset_names_its_source(preset):
    head = (ROOT / "configs" / f"{preset}.yaml").read_text().splitlines()[:3]
    assert any("https://huggingface.co/" in line and "config.json" in line for line in head)
