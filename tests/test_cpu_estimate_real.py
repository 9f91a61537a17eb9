"""The CPU estimate with the real compute Python (the workspace's, with torch): on a machine
without a GPU, a model far too large for its CPU is refused in one line before anything is
created, and the small preset is estimated and let through. Skips where a GPU is visible."""

from __future__ import annotations

import re

import pytest

from campaign_helpers import sweep


def gpu_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = pytest.mark.skipif(gpu_visible(), reason="a GPU is visible: nothing trains on the CPU here")


def test_a_model_too_large_for_this_cpu_is_refused_and_the_tiny_preset_is_estimated(tmp_path):
    local = {"THROUGHPUT_SWEEP_PROFILE": "local"}
    out = tmp_path / "camp"
    grid = ("--models", "tiny", "smollm2-135m", "--contexts", "2048")
    refused = sweep("run", "--output", out, *grid, env=local, rc=2)
    # tiny is named too where a loaded machine makes even its first point outlast the watchdog.
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("throughput-sweep: on this machine's CPU the first point of "), refused.stderr
    assert "smollm2-135m (" in line and "would outlast the watchdog's" in line, refused.stderr
    assert "Traceback" not in refused.stderr and not out.exists()
    timed = re.search(r"tiny at context 2048, batch 1 ran (\S+) s an update, (\S+) GFLOP/s", refused.stderr)
    assert timed and float(timed.group(1)) > 0 and float(timed.group(2)) > 0, refused.stderr

    quick = sweep("run", "--output", out, "--models", "tiny", "--contexts", "128", "--dry-run", env=local, rc=0)
    assert re.search(r"tiny at context 128, batch 1: \S+ s per update, \d+ s for the point", quick.stderr)
    assert "Dry run:" in quick.stdout and not out.exists()
