"""The gh200 profile's dry run, golden: the exact batch script and sbatch command line of
one point, as the guide's driver (docs/guide.md) prints them for a relative --output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from campaign_helpers import ROOT

GOLDEN = Path(__file__).parent / "golden" / "gh200-dry-run.txt"


def test_gh200_dry_run_prints_the_exact_script_and_sbatch_argv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "THROUGHPUT_SWEEP_PROFILE"}
    # Away from the GH200 cluster (no sbatch here), so the preflight is not run against another one.
    env["PATH"] = str(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/throughput_sweep.py"),
            "run",
            "--profile",
            "gh200",
            "--output",
            "runs/gh200-throughput",
            "--models",
            "250m",
            "--contexts",
            "2048",
            "--dry-run",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "preflight: not run (no sbatch on PATH)" in proc.stderr
    assert not (tmp_path / "runs").exists()
    text = proc.stdout.replace(str(tmp_path), "{HERE}").replace(str(ROOT), "{REPO}")
    # Whether this checkout holds the compute nodes' environment is not the profile's doing.
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("note: the compute Python"))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
