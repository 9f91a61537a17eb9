from __future__ import annotations

import pytest

from campaign_builder.complete import build_throughput


@pytest.fixture
def campaign(tmp_path):
    return build_throughput(tmp_path / "tp", unstable={"20m-c512": [2]})
