"""The audit on the real Slurm with SLURM_TIME_FORMAT=relative in the user's environment.

Exported, it makes sacct print "19:19:41" without a date. A scripted-worker campaign of two
curves is run and audited with it exported: the audit's own sacct calls must still read
full dates, so every worker's times and the peak concurrency are checked with real counts.
A receipt holding a dateless time (as an older campaign run so stored) fails, naming the
receipt, the field and the text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign_helpers import profile, sweep, write_plan
from throughput_audit.audit import run_audit
from throughput_schema.outcomes import SCHEDULER_PHASE

pytestmark = pytest.mark.slurm

CONTEXTS = ("512", "1024")


def _worker_results(campaign: Path) -> list[str]:
    found = []
    for result in sorted(campaign.glob("curves/*/b*/attempt-*/result.json")):
        if json.loads(result.read_text())["outcome"].get("phase") != SCHEDULER_PHASE:
            found.append(str(result.relative_to(campaign)))
    return found


def _dateless(text: str) -> bool:
    return bool(text) and text not in ("Unknown", "None") and "-" not in text


@pytest.fixture(scope="module")
def relative(local_slurm, tmp_path_factory):
    """A campaign run, and an environment to audit it in, with SLURM_TIME_FORMAT=relative."""
    tmp = tmp_path_factory.mktemp("relative")
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_TIME_FORMAT", "relative")
    # Two curves of three jobs, each job two seconds: the first jobs of both run at once.
    plan = write_plan(tmp, {"20m-c512-b4": "cuda_oom", "20m-c1024-b4": "cuda_oom"}, ok_seconds=2)
    camp = tmp / "camp"
    run = (
        "run",
        "--output",
        camp,
        "--profile",
        profile(tmp),
        "--models",
        "20m",
        "--contexts",
        *CONTEXTS,
        "--worker",
        "scripted_worker",
        "--window-seconds",
        "1",
        "--poll-max-seconds",
        "1",
        "--no-progress",
    )
    try:
        for args in (run, ("collect", "--output", camp)):
            proc = sweep(*args, plan=plan)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        yield camp
    finally:
        mp.undo()


def test_times_and_concurrency_are_checked_with_real_counts(relative):
    out = run_audit(relative, settle_seconds=20, allow_test_worker=True)
    checks = out.report.checks
    assert out.report.scheduler_accounting == "checked"
    times = [c for c in checks if c.name == "slurm.worker_times"]
    assert sorted(c.file for c in times) == _worker_results(relative) and len(times) == 6
    assert [c.message for c in times if c.status != "pass"] == []
    (peak,) = [c for c in checks if c.name == "slurm.peak_concurrency"]
    assert peak.status == "pass" and peak.values["counted"] == 6 and 2 <= peak.values["peak"] <= 12, peak.message
    # What the run stored is the sweep's business: receipts written with dateless times
    # (a sweep that did not override SLURM_TIME_FORMAT) must fail, each naming itself.
    dateless = []
    for receipt in sorted(relative.glob("curves/*/b*/attempt-*/receipt.json")):
        acc = json.loads(receipt.read_text()).get("accounting") or {}
        if _dateless(acc.get("start", "")) or _dateless(acc.get("end", "")):
            dateless.append(str(receipt.relative_to(relative)))
    named = sorted(c.file for c in checks if c.name == "receipt.times" and c.status == "fail")
    assert named == dateless
    allowed = {"receipt.times", "slurm.receipt_accounting", "published.accounting"} if dateless else set()
    assert {c.name for c in checks if c.status == "fail"} <= allowed, [c.message for c in checks if c.status == "fail"]


def test_a_receipt_with_a_dateless_time_fails_naming_receipt_field_and_text(relative, tmp_path):
    camp = Path(shutil.copytree(relative, tmp_path / "camp"))
    rel = "curves/20m-c512/b1/attempt-1/receipt.json"
    data = json.loads((camp / rel).read_text())
    data["accounting"]["start"] = "19:19:41"
    (camp / rel).write_text(json.dumps(data, indent=2))
    out = run_audit(camp, settle_seconds=20, allow_test_worker=True)
    bad = [c for c in out.report.checks if c.name == "receipt.times" and c.file == rel]
    assert len(bad) == 1 and bad[0].status == "fail"
    assert bad[0].message.startswith(f"{rel}: the recorded accounting's start '19:19:41' is not a date and time")
