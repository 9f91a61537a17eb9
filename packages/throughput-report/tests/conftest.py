"""Fixtures: campaign pairs written on disk from schema records (see tests/campaign_builder/gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign_builder import gpu as campaigns


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    """A small complete pair: two models at two contexts."""
    return campaigns.write_pair(tmp_path, "small", ["20m", "90m"], [512, 1024])


@pytest.fixture(scope="session")
def two_pairs(tmp_path_factory) -> tuple[list[Path], list[Path]]:
    """The guide's (docs/guide.md) combination: an original campaign and a context-512 campaign."""
    root = tmp_path_factory.mktemp("campaigns")
    a = campaigns.write_pair(root, "orig", ["20m", "250m"], [1024, 2048])
    b = campaigns.write_pair(root, "c512", ["20m", "250m"], [512])
    return [a[0], b[0]], [a[1], b[1]]
