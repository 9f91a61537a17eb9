"""Published accounting and worker times against what sacct says now, on a real Slurm.

One small controller campaign runs on the local cluster of tools/local-slurm.sh with the
scripted worker; each test audits a copy with one planted fault, which exactly one check
must catch, naming the file: collect publishes the receipt's accounting copy, so it must
equal sacct's row, and a worker's times must lie within its job's start and end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign_helpers import late_finish_is_caught, profile, receipt_edit_is_caught, scripted_campaign, write_plan
from throughput_audit.audit import run_audit

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]

POINT = Path("curves/20m-c512/b1/attempt-1")


@pytest.fixture(scope="module")
def finished(local_slurm, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("accounting")
    return scripted_campaign(tmp / "camp", profile(tmp), write_plan(tmp, {"20m-c512-b2": "cuda_oom"}, ok_seconds=0.1))


@pytest.fixture
def campaign(finished, tmp_path) -> Path:
    """A copy to plant a fault in."""
    return Path(shutil.copytree(finished, tmp_path / finished.name))


def audited(root: Path):
    out = run_audit(root, settle_seconds=20, allow_test_worker=True)
    assert out.report.scheduler_accounting == "checked"
    return out.report.checks


def test_untouched_campaign_matches_sacct(campaign):
    assert [c.message for c in audited(campaign) if c.status == "fail"] == []


def test_result_finished_an_hour_after_its_job_is_caught(campaign):
    late_finish_is_caught(audited, campaign, POINT, "slurm")


@pytest.mark.parametrize("field, value", [("elapsed_seconds", 2520.0), ("time_limit_seconds", 60.0)])
def test_receipt_accounting_differing_from_sacct_is_caught(campaign, field, value):
    receipt_edit_is_caught(audited, campaign, POINT, "slurm", field, value)
