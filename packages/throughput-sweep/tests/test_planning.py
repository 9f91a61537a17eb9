"""Planning: --dry-run shows the manifest that creation writes, and a resume is held to it."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from throughput_schema import Protocol
from throughput_sweep.campaign import CampaignError
from throughput_sweep.freezing import create
from throughput_sweep.planning import check_resume, plan_throughput
from throughput_sweep.profiles import embedded_local_profile

ROOT = Path(__file__).resolve().parents[3]


def _plan(tmp_path: Path):
    return plan_throughput(
        tmp_path / "c",
        models=["tiny"],
        contexts=[128, 256],
        protocol=Protocol(window_seconds=1.0),
        profile=embedded_local_profile(),
        max_batch=4,
        worker="tiny_llm",
        root=ROOT,
    )


def test_the_dry_run_previews_the_manifest_that_creation_writes(tmp_path):
    plan = _plan(tmp_path)
    preview = plan.preview()
    assert not plan.output.exists()
    made = create(plan)
    assert made.manifest.frozen_files and not preview.manifest.frozen_files
    same = dict(created_at=made.manifest.created_at, frozen_files=made.manifest.frozen_files)
    assert msgspec.structs.replace(preview.manifest, **same) == made.manifest
    assert preview.root == made.root


def test_a_resume_is_held_to_the_frozen_campaign(tmp_path):
    campaign = create(_plan(tmp_path))
    check_resume(campaign, models=None, contexts=[256, 128], max_batch=4, profile="local")
    with pytest.raises(CampaignError, match="needs a new campaign"):
        check_resume(campaign, models=None, contexts=[128], max_batch=None)
    with pytest.raises(CampaignError, match="protocol is frozen"):
        check_resume(campaign, models=None, contexts=None, max_batch=None, protocol=Protocol(window_seconds=2.0))
    # Nothing has run yet: another profile may replace the frozen one (frozen_profile.resume_profile).
    check_resume(campaign, models=None, contexts=None, max_batch=None, profile="gh200")
    (campaign.frozen / "uv.lock").write_text("edited\n")
    with pytest.raises(CampaignError, match="frozen files changed"):
        check_resume(campaign, models=None, contexts=None, max_batch=None)
