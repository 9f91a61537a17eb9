"""tools/h200.sh, the device runner, where no GPU is needed: it lists every recipe under
tools/h200/ with its one-line summary, refuses an unknown one in one line, and each recipe
parses and refuses missing arguments before it touches a GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tools/h200.sh"
RECIPES = sorted(p.stem for p in (ROOT / "tools/h200").glob("*.sh") if p.stem != "lib")


def _runner(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run(["bash", str(RUNNER), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_help_lists_every_recipe_with_its_summary():
    proc = _runner("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert listed == RECIPES
    for line in proc.stdout.splitlines():
        if line.startswith("  "):
            assert len(line.split(None, 1)) == 2, f"no summary: {line!r}"


@pytest.mark.parametrize("args", [(), ("nosuch",), ("lib",)])
def test_no_recipe_or_an_unknown_one_is_refused(args):
    proc = _runner(*args)
    assert proc.returncode == 2
    if args:
        assert proc.stderr.splitlines() == [f"h200.sh: no recipe {args[0]} (one of: {' '.join(RECIPES)})"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_recipe_parses(recipe):
    proc = subprocess.run(["bash", "-n", str(ROOT / "tools/h200" / f"{recipe}.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("recipe", "says"),
    [
        ("energy", "part: 1, 2 or 3"),
        ("fa4", "part: a, b, c, d, tests, levers, profiles, small, guide or gqa-rope"),
        ("cross-entropy", "part: 1, 2 or 3"),
        ("llama-presets", "part: 1 or 2"),
        ("kernel", "which kernel"),
        ("optimizer-timing", "output folder"),
        ("worker-figures", "output folder"),
        ("optimizer-kernels", "output folder"),
        ("swiglu", "output folder"),
        ("fp8", "output folder"),
    ],
)
def test_a_recipe_without_its_arguments_stops_before_the_gpu(recipe, says):
    proc = _runner(recipe)
    assert proc.returncode != 0
    assert says in proc.stderr


@pytest.mark.parametrize("recipe", ["e2e", "spot-check"])
def test_bad_arguments_are_refused_in_one_line(recipe):
    proc = _runner(recipe, "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"h200.sh {recipe}: unknown argument: --bogus (see --help)"]
