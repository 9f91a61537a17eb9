"""The README quick start on the CPU: local profile, real tiny_llm worker, --max-batch cap."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _worker_ready() -> bool:
    try:
        from tiny_llm import worker_cli
    except ImportError:
        return False
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    worker_cli.register(sub)
    return "benchmark-throughput-worker" in sub.choices and (ROOT / "configs/tiny.yaml").exists()


@pytest.mark.slow
@pytest.mark.skipif(not _worker_ready(), reason="tiny_llm.worker_cli has no benchmark-throughput-worker yet")
def test_quickstart_on_cpu(tmp_path):
    out = tmp_path / "runs" / "quickstart"
    started = time.monotonic()
    cmd = [sys.executable, str(ROOT / "scripts/throughput_sweep.py")]
    r = subprocess.run(
        cmd + ["run", "--output", str(out), "--models", "tiny", "--contexts", "128", "--max-batch", "8",
               "--window-seconds", "1", "--no-progress", "--poll-max-seconds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.monotonic() - started < 300
    status = subprocess.run(cmd + ["status", "--output", str(out)], cwd=ROOT, capture_output=True, text=True).stdout
    assert "tiny-c128" in status and "capped" in status and "no OOM up to the cap (batch 8)" in status
    assert ": complete" in status.splitlines()[0]
    r = subprocess.run(cmd + ["collect", "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    readme = (out / "README.md").read_text()
    assert not readme.startswith("**INCOMPLETE**")
    assert "| tiny-c128 | capped: no OOM up to the cap (8) | 1 2 4 8 | 8 | - |" in readme
    results = json.loads((out / "results.json").read_text())
    [curve] = results["curves"]
    assert curve["state"] == "capped" and curve["first_oom_batch"] is None and curve["fitting_batches"] == [1, 2, 4, 8]
    assert curve["fastest_stable_batch"] in (1, 2, 4, 8) or curve["unstable_batches"]
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 5 and all(",ok," in row for row in rows[1:])
    for png in ("throughput.png", "memory.png"):
        assert (out / png).stat().st_size > 1000
