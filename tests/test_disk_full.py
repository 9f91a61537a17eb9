"""A full filesystem under a finished campaign: collect and the audit refuse in one line and
leave their previous outputs whole; the campaign's files are unchanged (a real size-limited
tmpfs, mounted by the test where the machine allows it)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import ROOT, scripted_run, sweep, write_plan

pytestmark = pytest.mark.slow

AUDIT = [sys.executable, "-m", "throughput_audit.cli", "--allow-test-worker"]


@pytest.fixture
def small_fs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of the filesystem under `folder`."""
    path = folder / "filler"
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_collect_and_the_audit_refuse_on_a_full_disk_and_keep_their_outputs(small_fs, tmp_path):
    plan = write_plan(tmp_path, {})
    out = small_fs / "camp"
    assert sweep(*scripted_run(out, 512, max_batch=2, poll_max=1), plan=plan).returncode == 0
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
    audited = subprocess.run([*AUDIT, "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    before = snapshot(out)
    filler = fill(small_fs)

    collect = sweep("collect", "--output", out, plan=plan)
    assert collect.returncode == 2
    line = one_line(collect.stderr)
    assert line.startswith(f"throughput-sweep: cannot write {out}/"), line
    assert "No space left on device (ENOSPC): its filesystem is full or over its quota" in line
    audit = subprocess.run([*AUDIT, "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert audit.returncode == 2
    assert one_line(audit.stderr).startswith(f"throughput-audit: cannot write {out}/audit")
    assert "No space left on device (ENOSPC): its filesystem is full" in audit.stderr
    assert snapshot(out) == before, "a refused command changed the campaign's files"

    os.unlink(filler)
    assert sweep("collect", "--output", out, plan=plan).returncode == 0
