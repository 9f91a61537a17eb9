"""The curve state machine, from constructed attempt records (no Slurm, no files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_schema import (
    ClusterProfile,
    Manifest,
    PointSpec,
    Protocol,
    Receipt,
    Settlement,
    SubmissionIntent,
    Throughput,
    WorkerResult,
)
from throughput_schema.layout import Attempt
from throughput_schema.outcomes import CompileError, CudaOom, HostOom, NonFinite, Ok, Timeout, outcome_kind
from throughput_schema.recipe import load_recipe
from throughput_schema.records import WorkerIdentity
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.curves import derive, pick
from throughput_sweep.schedulers.slurm.text import job_status
from throughput_sweep.submission import outcome_of

ROOT = Path(__file__).resolve().parents[3]
RECIPE = load_recipe(ROOT / "configs" / "20m.yaml")
PROFILE = ClusterProfile(name="t", scheduler="slurm")


def manifest(**kw) -> Manifest:
    base = dict(
        kind="throughput",
        name="t",
        created_at="2026-01-01T00:00:00+00:00",
        models=["20m"],
        contexts=[512],
        protocol=Protocol(),
        profile=PROFILE,
        tool_version="0",
    )
    base.update(kw)
    return Manifest(**base)


def result(outcome, rate: float = 1000.0, unstable: bool = False) -> WorkerResult:
    t = None
    if isinstance(outcome, Ok):
        t = Throughput(
            tokens_per_second=rate,
            sequences_per_second=rate / 512,
            window_tokens_per_second=[rate],
            cv=0.0,
            unstable=unstable,
            update_ms=1.0,
        )
    return WorkerResult(
        outcome=outcome, recipe=RECIPE, parameters=1, throughput=t, worker=WorkerIdentity(module="tiny_llm")
    )


def att(
    batch,
    outcome=None,
    *,
    attempt=1,
    model="20m",
    context=512,
    state="done",
    settlement=None,
    optimizer=False,
    rate=None,
    unstable=False,
    baseline="ok",
    scheduler="slurm",
):
    tok = f"tok-{model}-{context}-{batch}-{attempt}"
    intent = SubmissionIntent(
        token=tok,
        campaign="t",
        point=PointSpec(model=model, context_length=context, batch_size=batch),
        script_sha256="0",
        created_at="2026-01-01T00:00:00+00:00",
        scheduler=scheduler,
    )
    receipt = (
        None
        if state in ("intent", "settled")
        else Receipt(token=tok, job_id=str(100 + batch), submitted_at="x", scheduler=scheduler)
    )
    res = result(outcome, rate or 1000.0 * batch, unstable) if (state == "done" and outcome is not None) else None
    base = None
    if optimizer and res is not None:
        base = result(Ok(), 900.0 * batch) if baseline == "ok" else None
    a = Attempt(
        path=Path(f"/c/curves/{model}-c{context}/b{batch}/attempt-{attempt}"),
        model=model,
        context_length=context,
        batch_size=batch,
        attempt=attempt,
        intent=intent,
        receipt=receipt,
        result=res,
        baseline=base,
    )
    s = Settlement(token=tok, state=settlement, reason="r", decided_at="x") if settlement else None
    return AttemptInfo(attempt=a, settlement=s, optimizer=optimizer)


def one(m, infos, retry=frozenset()):
    [c] = derive(m, infos, retry)
    return c


def test_empty_campaign_starts_every_curve_at_batch_one():
    curves = derive(manifest(models=["20m", "90m"], contexts=[512, 1024]), [])
    assert [c.name for c in curves] == ["20m-c512", "20m-c1024", "90m-c512", "90m-c1024"]
    assert all(c.state == "pending" and [(n.batch_size, n.attempt) for n in c.next] == [(1, 1)] for c in curves)


def test_doubling_until_oom_sets_the_boundary():
    c = one(manifest(), [att(1, Ok()), att(2, Ok()), att(4, Ok(), unstable=True), att(8, CudaOom())])
    assert c.state == "bounded" and c.fitting == [1, 2, 4] and c.first_oom == 8 and c.largest_fitting == 4
    assert c.unstable == [4]
    assert c.fastest_stable == (2, 2000.0)  # batch 4 is faster but unstable
    assert c.next == [] and c.failed == []
    s = c.summary()
    assert (s.fastest_stable_batch, s.first_oom_batch, s.unstable_batches) == (2, 8, [4])


def test_next_batch_is_the_doubling_and_running_waits():
    c = one(manifest(), [att(1, Ok()), att(2, Ok())])
    assert c.state == "pending" and [n.batch_size for n in c.next] == [4]
    c = one(manifest(), [att(1, Ok()), att(2, None, state="submitted")])
    assert c.state == "running" and c.next == [] and [r.batch for r in c.running] == [2]
    c = one(manifest(), [att(1, Ok()), att(2, None, state="intent")])
    assert c.state == "running"  # an unsettled intent may be a job: never submit beside it


@pytest.mark.parametrize("bad", [Timeout(), HostOom(), CompileError(), NonFinite()])
def test_any_other_failure_blocks_and_never_sets_a_boundary(bad):
    c = one(manifest(), [att(1, Ok()), att(2, bad)])
    assert c.state == "blocked" and c.first_oom is None and c.next == []
    assert outcome_kind(bad) in c.blocked_reason and "batch 2" in c.blocked_reason
    assert [f.batch for f in c.failed] == [2]
    assert c.summary().failed_attempts[0].outcome == outcome_kind(bad)


def test_retry_failed_gets_a_fresh_attempt_and_keeps_the_failed_one():
    infos = [att(1, Ok()), att(2, Timeout())]
    c = one(manifest(), infos, retry=frozenset({infos[1].attempt.path}))
    assert c.state == "pending" and [(n.batch_size, n.attempt) for n in c.next] == [(2, 2)]
    # The retry succeeded: the curve goes on; the failed attempt stays in the record.
    c = one(manifest(), infos + [att(2, Ok(), attempt=2)])
    assert c.state == "pending" and c.fitting == [1, 2] and [n.batch_size for n in c.next] == [4]
    assert [(f.batch, f.number) for f in c.failed] == [(2, 1)]


def test_never_submitted_intent_is_void_and_retried_in_a_fresh_attempt():
    c = one(manifest(), [att(1, Ok()), att(2, None, state="settled", settlement="never-submitted")])
    assert c.state == "pending" and [(n.batch_size, n.attempt) for n in c.next] == [(2, 2)]


def test_ambiguous_blocks_and_retry_failed_does_not_touch_it():
    infos = [att(1, Ok()), att(2, None, state="settled", settlement="ambiguous")]
    c = one(manifest(), infos, retry=frozenset({infos[1].attempt.path}))
    assert c.state == "blocked" and "reconcile" in c.blocked_reason and c.next == []


def test_refused_submission_blocks_until_retried():
    infos = [att(1, None, state="settled", settlement="refused")]
    c = one(manifest(), infos)
    assert c.state == "blocked" and "refused" in c.blocked_reason
    c = one(manifest(), infos, retry=frozenset({infos[0].attempt.path}))
    assert [(n.batch_size, n.attempt) for n in c.next] == [(1, 2)]


def test_cap_gives_no_oom_up_to_the_cap_never_a_boundary():
    c = one(manifest(max_batch=4), [att(1, Ok()), att(2, Ok()), att(4, Ok())])
    assert c.state == "capped" and c.first_oom is None and c.largest_fitting == 4 and c.done
    c = one(manifest(max_batch=4), [att(1, Ok()), att(2, Ok())])
    assert [n.batch_size for n in c.next] == [4]
    c = one(manifest(max_batch=4), [att(1, Ok()), att(2, Ok()), att(4, CudaOom())])
    assert c.state == "bounded" and c.first_oom == 4


def opt_manifest(parallel=False, grid=(1, 2, 4)):
    return manifest(kind="optimizer-timing", inherited_batches={"20m-c512": list(grid)}, parallel_points=parallel)


def test_optimizer_sequential_stops_at_the_inherited_largest_fitting_batch():
    m = opt_manifest()
    c = one(m, [att(1, Ok(), optimizer=True), att(2, Ok(), optimizer=True)])
    assert [n.batch_size for n in c.next] == [4]
    c = one(m, [att(b, Ok(), optimizer=True) for b in (1, 2, 4)])
    assert c.state == "complete" and c.fitting == [1, 2, 4] and c.next == []


def test_optimizer_oom_is_unexpected_and_blocks():
    c = one(opt_manifest(), [att(1, Ok(), optimizer=True), att(2, CudaOom(), optimizer=True)])
    assert c.state == "blocked" and "unexpected CUDA OOM" in c.blocked_reason and c.first_oom is None


def test_optimizer_point_without_baseline_is_a_failure():
    c = one(opt_manifest(), [att(1, Ok(), optimizer=True, baseline=None)])
    assert c.state == "blocked" and "baseline" in c.blocked_reason


def test_parallel_submits_every_inherited_point_and_a_failure_pauses_only_its_curve():
    m = opt_manifest(parallel=True, grid=(1, 2, 4, 8))
    c = one(m, [])
    assert c.state == "pending" and [n.batch_size for n in c.next] == [1, 2, 4, 8]
    c = one(
        m,
        [
            att(1, Ok(), optimizer=True),
            att(2, Timeout(), optimizer=True),
            att(4, None, state="submitted", optimizer=True),
        ],
    )
    assert c.state == "blocked" and c.next == [] and [r.batch for r in c.running] == [4] and not c.done
    infos = [att(1, Ok(), optimizer=True), att(2, Timeout(), optimizer=True)]
    c = one(m, infos, retry=frozenset({infos[1].attempt.path}))
    assert [(n.batch_size, n.attempt) for n in c.next] == [(2, 2)]  # only the failed point first
    c = one(m, infos + [att(2, None, attempt=2, state="submitted", optimizer=True)])
    assert c.state == "running" and c.next == []  # the rest waits for the retry's success
    c = one(m, infos + [att(2, Ok(), attempt=2, optimizer=True)])
    assert c.state == "pending" and [n.batch_size for n in c.next] == [4, 8]
    c = one(m, [att(b, Ok(), optimizer=True) for b in (1, 2, 4, 8)])
    assert c.state == "complete" and c.done


def test_other_curves_are_unaffected_by_a_blocked_curve():
    m = manifest(models=["20m"], contexts=[512, 1024])
    curves = derive(m, [att(1, CompileError()), att(1, Ok(), context=1024)])
    assert [c.state for c in curves] == ["blocked", "pending"]
    assert [(n.curve, n.batch_size) for n in pick(curves, 12)] == [("20m-c1024", 2)]


def test_pick_respects_free_slots_smallest_batches_first():
    m = manifest(models=["a", "b", "c"], contexts=[512])
    curves = derive(m, [att(1, Ok(), model="a")])
    assert [(n.curve, n.batch_size) for n in pick(curves, 2)] == [("b-c512", 1), ("c-c512", 1)]
    assert pick(curves, 0) == [] and pick(curves, -3) == []


def _closure(batch: int, attempt: int = 1, outcome: str = "host_oom"):
    from throughput_schema import CurveClosure

    return CurveClosure(
        curve="20m-c512",
        batch_size=batch,
        attempt=attempt,
        outcome=outcome,
        reason="host memory",
        closed_at="2026-01-01T00:00:00+00:00",
        user="u",
        host="h",
    )


def test_a_closure_on_the_last_failure_closes_the_curve_and_is_never_a_boundary():
    infos = [att(1, Ok()), att(2, HostOom())]
    [c] = derive(manifest(), infos, closures={"20m-c512": _closure(2)})
    assert c.state == "closed" and c.done and c.first_oom is None and c.fitting == [1]
    assert c.describe == "closed by hand at batch 2: host memory"
    summary = c.summary()
    assert summary.state == "closed" and summary.closure.batch_size == 2 and summary.first_oom_batch is None


def test_a_closed_curve_is_not_retried_by_retry_failed():
    infos = [att(1, Ok()), att(2, HostOom())]
    [c] = derive(manifest(), infos, frozenset({infos[1].attempt.path}), {"20m-c512": _closure(2)})
    assert c.state == "closed" and c.next == []


def test_a_closure_that_names_another_attempt_is_stale():
    # Closed on attempt 1, then retried anyway and failed again: a person must look again.
    infos = [att(1, Ok()), att(2, HostOom()), att(2, HostOom(), attempt=2)]
    [c] = derive(manifest(), infos, closures={"20m-c512": _closure(2, attempt=1)})
    assert c.state == "blocked" and c.closure is None
    [c] = derive(manifest(), [att(1, Ok()), att(2, None, state="submitted")], closures={"20m-c512": _closure(2)})
    assert c.state == "running"


@pytest.mark.parametrize("scheduler", ["local", "slurm"])
def test_a_result_written_from_the_schedulers_word_names_the_scheduler_the_job_ran_on(scheduler):
    # The local scheduler records NODE_FAIL when a job's wrapper vanished (a restarted machine).
    lost = att(2, outcome_of(job_status("2", "NODE_FAIL"), 60.0), scheduler=scheduler)
    assert lost.message == f"{scheduler} job ended NODE_FAIL without result.json"
    [c] = derive(manifest(profile=ClusterProfile(name="t", scheduler=scheduler)), [att(1, Ok()), lost])
    assert c.state == "blocked" and f"{scheduler} job ended NODE_FAIL" in c.blocked_reason
