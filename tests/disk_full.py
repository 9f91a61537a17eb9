"""What the disk-full tests share: filling a real small filesystem, and what a full disk must
look like to the user (tests/test_disk_full.py, tests/test_disk_full_slurm.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from campaign_helpers import write_plan
from scripted_worker import fill_filesystem


def fill(folder: Path) -> Path:
    """Take every free byte of the filesystem under `folder`."""
    path = folder / "filler"
    fill_filesystem(path)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def filling_plan(tmp_path: Path, filler: Path) -> Path:
    """Batch 2's first attempt fills the campaign's filesystem before writing its result; 4 is
    the curve's CUDA OOM."""
    return write_plan(tmp_path, {"20m-c512-b2@1": {"outcome": "ok", "fill": str(filler)}, "20m-c512-b4": "cuda_oom"})


def stopped_line(run: subprocess.CompletedProcess, out: Path) -> str:
    """The watcher's one line for a disk that filled under it."""
    assert run.returncode == 2, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if not line.startswith("[sweep]")]
    assert len(said) == 1 and "Traceback" not in run.stderr, run.stderr
    line = said[0]
    assert line.startswith(f"throughput-sweep: {out}: the watcher stopped: cannot write {out}/"), line
    assert "No space left on device (ENOSPC): its filesystem is full or over its quota; nothing more is" in line
    assert line.endswith(f"run --output {out} --resume"), line
    return line


def storage_full_point(out: Path) -> dict:
    """Batch 2's first attempt: the derived storage_full result, never an OOM or a crash."""
    result = json.loads((out / "curves/20m-c512/b2/attempt-1/result.json").read_text())
    outcome = result["outcome"]
    assert outcome["kind"] == "storage_full", outcome
    assert outcome["message"].startswith("result could not be written (disk full or over quota)"), outcome
    return result
