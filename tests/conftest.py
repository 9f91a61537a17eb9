"""tests/: the committed worked example's archive unpacked once per session; a small real filesystem."""

import subprocess
import tarfile
from pathlib import Path

import pytest

WORKED_EXAMPLE_ARCHIVE = Path(__file__).resolve().parents[1] / "docs/examples/h200-e2e-state/e2e-h200.tar.gz"


@pytest.fixture(scope="session")
def worked_example(tmp_path_factory) -> Path:
    """The H200 run's campaign folders (`throughput/`, `optimizer/`) as the GPU machine
    packed them. Tests may write into them (audit, collect): each session unpacks anew."""
    where = tmp_path_factory.mktemp("worked-example")
    with tarfile.open(WORKED_EXAMPLE_ARCHIVE) as tar:
        tar.extractall(where, filter="data")
    return where / "e2e-h200"


@pytest.fixture
def small_fs(tmp_path):
    """A real 8 MiB tmpfs under the test's folder, for the disk-full tests (skipped, saying why,
    where the machine does not let the test mount one)."""
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
