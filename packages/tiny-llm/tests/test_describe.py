"""`python -m tiny_llm describe` as a user runs it: no GPU, JSON out, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def describe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tiny_llm", "describe", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("preset, exact", [("250m", 251_943_360), ("500m", 516_814_080)])
def test_describe_prints_exact_parameter_count(preset, exact):
    done = describe(
        "--config",
        f"configs/{preset}.yaml",
        "--set",
        "model.context_length=2048",
        "--set",
        "training.micro_batch_size=8",
        "--set",
        "training.batch_tokens=16384",
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["parameters"] == exact
    assert payload["recipe"]["model"]["context_length"] == 2048
    assert payload["tokens_per_update"] == 16384


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "model.widht=3"], "unknown key 'model.widht'"),
        (["--set", "training.micro_batch_size=x"], "Expected `int`, got `str`"),
        (["--set", "training.micro_batch_size=16"], "there is no gradient accumulation"),
    ],
)
def test_describe_bad_input_is_one_line_exit_2(args, message):
    done = describe("--config", "configs/250m.yaml", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_describe_missing_config_file():
    done = describe("--config", "configs/nope.yaml")
    assert done.returncode == 2 and "config file not found" in done.stderr
