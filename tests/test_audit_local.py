"""The audit of a local campaign against its scheduler's registry (`.local-jobs/`).

One small campaign is run on the local scheduler with the scripted worker (no GPU, no
Slurm); each test audits a copy of it with one planted fault, which must fail only the
checks it concerns, naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from campaign_helpers import (
    late_finish_is_caught,
    only_failure,
    receipt_edit_is_caught,
    recollect,
    scripted_campaign,
    write_plan,
)
from throughput_audit.audit import run_audit, write_outputs
from throughput_schema.local_jobs import LOCAL_JOBS_DIR

pytestmark = pytest.mark.slow  # whole campaigns on the local scheduler

POINT = Path("curves/20m-c512/b2/attempt-1")


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("local")
    return scripted_campaign(tmp / "camp", "local", write_plan(tmp, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05))


@pytest.fixture
def campaign(finished, tmp_path) -> Path:
    """A copy to plant a fault in."""
    return Path(shutil.copytree(finished, tmp_path / finished.name))


def _profile_mem(root: Path) -> str:
    return json.loads((root / "manifest.json").read_text())["profile"]["mem"]


def audited(root: Path):
    return run_audit(root, settle_seconds=0, allow_test_worker=True).report.checks


def test_untouched_local_campaign_passes_against_its_registry(campaign):
    out = run_audit(campaign, settle_seconds=0, allow_test_worker=True)
    write_outputs(campaign, out)
    assert [c.message for c in out.report.checks if c.status == "fail"] == []
    assert out.report.scheduler_accounting == "checked"
    names = {c.name for c in out.report.checks}
    assert {
        "local.accounted",
        "local.identity",
        "local.state",
        "local.worker_times",
        "local.receipt_accounting",
        "local.allocation",
        "local.unreceipted",
        "local.peak_concurrency",
    } <= names
    # The accounting shows what the job really had (the machine's CPUs, shared), not the
    # profile's nominal 8 CPUs, and says the request was not enforced.
    cpus = len(os.sched_getaffinity(0))
    registry = json.loads((campaign / LOCAL_JOBS_DIR / "1.json").read_text())
    assert registry["machine_cpus"] == cpus and registry["cpus"] == 8 and registry["machine_mem"].endswith("M")
    receipt = json.loads((campaign / "curves/20m-c512/b1/attempt-1/receipt.json").read_text())
    allocated = receipt["accounting"]["allocation"]
    assert allocated["cpus"] == cpus and allocated["memory_bytes"] == int(registry["machine_mem"][:-1]) << 20
    # The memory the campaign's profile asked for, as the local scheduler records it.
    assert registry["mem"] == _profile_mem(campaign)
    allocation = next(c for c in out.report.checks if c.name == "local.allocation")
    assert f"not enforced by the local scheduler: it shared the machine's {cpus} CPUs" in allocation.message
    assert f"cpu={cpus}," in (campaign / "accounting.txt").read_text()


def test_receipt_naming_a_job_the_registry_never_ran_is_caught(campaign):
    receipt = campaign / POINT / "receipt.json"
    job = json.loads(receipt.read_text())["job_id"]
    edit(receipt, lambda d: (d.update(job_id="999"), d["accounting"].update(job_id="999")))
    recollect(campaign)
    bad = [c for c in audited(campaign) if c.status == "fail"]
    assert sorted(c.name for c in bad) == ["local.accounted", "local.unreceipted"]
    accounted = next(c for c in bad if c.name == "local.accounted")
    assert accounted.message == f"{POINT}/receipt.json: job 999 is not in the local job registry (.local-jobs)"
    unreceipted = next(c for c in bad if c.name == "local.unreceipted")
    assert unreceipted.message.startswith(f".local-jobs/{job}.json: job {job} (")
    assert f"ran without a receipt in the campaign; its token is that of {POINT}/intent.json" in unreceipted.message


def test_result_finished_after_its_job_ended_is_caught(campaign):
    late_finish_is_caught(audited, campaign, POINT, "local")


@pytest.mark.parametrize("field, value", [("elapsed_seconds", 2520.0), ("time_limit_seconds", 60.0)])
def test_receipt_accounting_differing_from_the_registry_is_caught(campaign, field, value):
    receipt_edit_is_caught(audited, campaign, POINT, "local", field, value)


def test_registry_job_with_another_request_is_caught(campaign):
    job = json.loads((campaign / POINT / "receipt.json").read_text())["job_id"]
    edit(campaign / LOCAL_JOBS_DIR / f"{job}.json", lambda d: d.update(cpus=2))
    bad = only_failure(audited(campaign), "local.allocation", f"{POINT}/receipt.json")
    assert "requested cpus 2, profile requires 8" in bad.message


def _published(d: dict, key: str) -> dict:
    """results.json's point or receipt row of POINT."""
    if key == "points":
        return next(p for p in d["points"] if (p["curve"], p["batch_size"]) == ("20m-c512", 2))
    return next(r for r in d["receipts"] if r["path"] == str(POINT))


def test_published_accounting_differing_from_the_receipts_is_caught(campaign):
    edit(campaign / "results.json", lambda d: _published(d, "points").update(job_elapsed_seconds=2520.0))
    bad = only_failure(audited(campaign), "published.accounting", "results.json")
    assert bad.message.startswith(f"results.json: {POINT} job_elapsed_seconds 2520.0, receipt '")


def test_published_receipt_differing_from_the_receipt_file_is_caught(campaign):
    edit(campaign / "results.json", lambda d: _published(d, "receipts")["accounting"].update(exit_code=9))
    bad = only_failure(audited(campaign), "published.receipt", "results.json")
    assert bad.message == (
        f"results.json: the receipt published for {POINT} differs from its receipt.json: "
        "accounting.exit_code 9, receipt.json 0"
    )


def test_unreadable_registry_is_one_finding(campaign):
    (campaign / LOCAL_JOBS_DIR / "1.json").write_bytes(bytes(range(256)) + b"\xff\xfe" * 22)
    bad = only_failure(audited(campaign), "local.registry", LOCAL_JOBS_DIR)
    assert "1.json" in bad.message and "\n" not in bad.message
