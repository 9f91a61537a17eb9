"""tools/h200.sh spot-check as far as a CPU can take it: the committed H200 example is
restored from its state archive, found complete and audited, and the spot check's dry run
shows the sample (six points, every curve's recommended batch among them) and the job
script A's own frozen copy runs; nothing is measured or written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # restores the worked example's archive

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_against_the_restored_example(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    env = dict(os.environ, THROUGHPUT_PYTHON=sys.executable)
    proc = subprocess.run(
        [str(ROOT / "tools/h200.sh"), "spot-check", "--dry-run", "--runs", str(runs), "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    source = runs / "e2e-h200" / "throughput"
    assert f"parent campaign: {source}; spot check of 6 points, seed 0" in text
    assert "would submit now: 6 job(s)" in text
    # The example's recommendations (each curve's status line) are all in the sample.
    status = (runs / "source-status.txt").read_text()
    for curve, batch in (("20m-c512", 1024), ("20m-c2048", 256), ("250m-c512", 256), ("250m-c2048", 64)):
        assert re.search(rf"^{curve} +bounded", status, re.M)
        assert re.search(rf"^{curve} +bounded.*\n    recommended: batch {batch} ", status, re.M)
        sampled = re.search(rf"^  {curve} .*\(inherited batches ([0-9 ]+)\)$", text, re.M).group(1).split()
        assert str(batch) in sampled
    # Every job script is today's, on the attempt's request (which A's own frozen watchdog,
    # older than requests, cannot read: measuring needs an A frozen by today's code).
    assert "-m throughput_sweep.node.watchdog --request" in text and "--recipe" not in text
    assert not (runs / "spot-check").exists()
    assert (out / "spot-check.log").is_file()
