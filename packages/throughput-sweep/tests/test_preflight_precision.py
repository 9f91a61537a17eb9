"""The preflight's check of an FP8 campaign's compute Python: torchao imports, does not, or
the Python does not run here (then a note, never a pass)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from throughput_schema import ClusterProfile
from throughput_sweep.preflight_precision import check_precision
from throughput_sweep.schedulers.base import Findings


def profile(python: str) -> ClusterProfile:
    return ClusterProfile(name="gpu", scheduler="slurm", python=python)


def without_torchao(tmp_path: Path) -> str:
    """A compute Python whose environment lacks torchao, as its interpreter says it."""
    script = tmp_path / "python"
    script.write_text("#!/bin/bash\necho \"ModuleNotFoundError: No module named 'torchao'\" >&2\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def test_a_compute_python_with_torchao_passes():
    pytest.importorskip("torchao.float8")
    found = Findings()
    check_precision(profile(sys.executable), "fp8-rowwise", found)
    assert found.problems == [] and found.notes == []
    assert found.checked == [f"{sys.executable} imports torchao for fp8-rowwise"]


def test_a_compute_python_without_torchao_is_a_problem_naming_the_fix(tmp_path):
    found = Findings()
    python = without_torchao(tmp_path)
    check_precision(profile(python), "fp8-tensorwise", found)
    assert found.problems == [
        f"--precision fp8-tensorwise: the profile's python {python} cannot import torchao "
        "(ModuleNotFoundError: No module named 'torchao'); install tiny-llm's fp8 extra there "
        "(uv sync --locked --all-packages --extra fp8), or run --precision bf16"
    ]


def test_a_python_that_does_not_run_here_is_a_note_and_bf16_asks_nothing(tmp_path):
    found = Findings()
    check_precision(profile(str(tmp_path / "no-such-python")), "fp8-tensorwise", found)
    assert found.problems == [] and found.checked == []
    assert found.notes[0].startswith("torchao for --precision fp8-tensorwise was not checked:")
    check_precision(profile(without_torchao(tmp_path)), "bf16", quiet := Findings())
    assert (quiet.problems, quiet.notes, quiet.checked) == ([], [], [])
