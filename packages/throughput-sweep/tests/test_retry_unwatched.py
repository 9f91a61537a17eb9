"""--resume --retry-failed retries a job that ended while no watcher ran, even when the run
learns of its end only after its start-up (the scheduler did not answer then): one run, not two.

The local scheduler and the scripted worker run real jobs; only the first answers of the
scheduler are withheld, as a squeue that timed out would withhold them."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from campaign_helpers import scripted_run, start_sweep
from throughput_schema.layout import RECEIPT, RESULT, attempt_dir
from throughput_sweep.campaign import open_campaign
from throughput_sweep.exit_statuses import EXIT_COMPLETE
from throughput_sweep.schedulers import make_scheduler
from throughput_sweep.schedulers.base import QueryFailed
from throughput_sweep.status import exit_status
from throughput_sweep.watcher import Watcher, WatchOptions

pytestmark = pytest.mark.slow  # a whole campaign on the local scheduler

TESTS = Path(__file__).resolve().parents[3] / "tests"


class NoAnswerAtFirst:
    """The campaign's own scheduler, whose first `failures` polls do not answer."""

    def __init__(self, scheduler, failures: int) -> None:
        self._scheduler, self.failures = scheduler, failures

    def __getattr__(self, name):
        return getattr(self._scheduler, name)

    async def poll(self, job_ids):
        if self.failures:
            self.failures -= 1
            raise QueryFailed("the local job registry did not answer (withheld by the test)")
        return await self._scheduler.poll(job_ids)


def _wait_for(predicate, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_job_that_ended_unwatched_is_retried_by_the_same_run(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    points = {"20m-c512-b2@1": {"outcome": "sleep", "seconds": 3600}, "20m-c512-b4": "cuda_oom"}
    plan.write_text(json.dumps({"default": "ok", "ok_seconds": 0.05, "points": points}))
    monkeypatch.setenv("PYTHONPATH", str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("SCRIPTED_WORKER_PLAN", str(plan))
    out = tmp_path / "camp"
    args = scripted_run(out, 512, profile="local", poll_max=1)
    first = start_sweep(*args, plan=plan, log=tmp_path / "first.log")
    b2 = attempt_dir(out, "20m", 512, 2, 1)
    try:
        _wait_for(lambda: (b2 / RECEIPT).is_file(), "batch 2's job")
    finally:
        first.send_signal(signal.SIGKILL)  # the watcher dies; the job keeps running
        first.wait()
    campaign = open_campaign(out)
    local = make_scheduler(campaign.manifest.profile, campaign.root)
    job = json.loads((b2 / RECEIPT).read_text())["job_id"]
    anyio.run(local.cancel, job)  # someone else cancels it while no watcher runs
    _wait_for(lambda: anyio.run(local.poll, [job])[job].finished, "the cancelled job to end")
    # Usually the job ends without a result, so the run learns of the failure only in its loop
    # (the case this test is for). On a loaded machine the job's own side may write its
    # "cancelled" result before it ends; start-up then sees the failure. Either way the same
    # run must retry it.

    # Both start-up polls go unanswered: the run learns of the cancellation in its loop.
    scheduler = NoAnswerAtFirst(make_scheduler(campaign.manifest.profile, campaign.root), failures=2)
    options = WatchOptions(retry_failed=True, poll_max=1.0, progress=False)
    assert anyio.run(Watcher(campaign, scheduler, options).run) == 0
    assert scheduler.failures == 0
    # Cancelled, or lost if its wrapper was gone before it could say so: a failure either way.
    assert json.loads((b2 / RESULT).read_text())["outcome"]["kind"] in ("cancelled", "node_fail")
    retried = json.loads((attempt_dir(out, "20m", 512, 2, 2) / RESULT).read_text())
    assert retried["outcome"]["kind"] == "ok"
    assert exit_status(campaign.curves()) == EXIT_COMPLETE
