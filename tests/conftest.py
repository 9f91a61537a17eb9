"""tests/: the committed worked example's archive unpacked once per session."""

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
