"""The audit's planted-fault suite: one fault per row, planted in a finished campaign built
on the CPU, and the check that must catch it.

A row is (fault, function that edits the campaign, the check expected to fail, other
checks the same edit cannot help failing). A row passes only when nothing but the
expected check and the listed others fail, so each proves that its check catches
something the rest would not. A fault not caught yet names what will catch it
(`pending`) and is a strict xfail until then. The share of rows caught is the audit's
figure, stated with the table in docs/reliability.md ("What the audit catches"), which a
test keeps equal to this file: `python THIS_FILE` re-plants every fault and prints the
share, `python THIS_FILE --table` the table. To add a fault: a function and one row.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest

from throughput_audit.audit import run_audit
from throughput_schema import Hardware, WorkerResult
from throughput_schema.layout import MANIFEST, RESULTS_JSON
from throughput_schema.recipe import flops_per_token

from campaign_builder.complete import BuiltCampaign, FakeSacct, build_optimizer, build_throughput
from campaign_builder.results import throughput_of


@dataclass
class Planted:
    """What a fault may edit: the campaign's files, and what sacct will answer."""

    built: BuiltCampaign
    sacct: FakeSacct
    tmp: Path
    parent: BuiltCampaign | None = None

    def donor(self, **build) -> BuiltCampaign:
        """Another campaign of the same name whose jobs sacct knows too: points to graft in."""
        donor = build_throughput(self.tmp / "donor" / self.built.root.name, start_id=3000, **build)
        self.sacct.rows.update(donor.rows)
        return donor

    def folder(self, curve: str, batch: int) -> Path:
        return self.built.points[curve][batch]

    def edit(self, rel: str | Path, change: Callable[[dict], object]) -> None:
        path = self.built.root / rel
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2))

    def edit_point(self, curve: str, batch: int, name: str, change: Callable[[dict], object]) -> None:
        self.edit(self.folder(curve, batch) / name, change)

    def rewrite_result(self, curve: str, batch: int, change: Callable[[WorkerResult], WorkerResult], name: str = "result.json") -> None:
        """A forger's edit: change the record, then make every derived figure agree with it."""
        path = self.folder(curve, batch) / name
        res = change(msgspec.json.decode(path.read_bytes(), type=WorkerResult))
        if res.throughput is not None:
            m = res.recipe.model
            tp = throughput_of(res.windows, res.recipe.training.micro_batch_size, m.context_length, res.protocol)
            res = msgspec.structs.replace(res, throughput=tp)
        path.write_bytes(msgspec.json.encode(res))

    def job(self, curve: str, batch: int) -> str:
        return json.loads((self.folder(curve, batch) / "receipt.json").read_text())["job_id"]

    def sacct_row(self, curve: str, batch: int, **changes) -> None:
        job = self.job(curve, batch)
        self.sacct.rows[job] = msgspec.structs.replace(self.sacct.rows[job], **changes)


Plant = Callable[[Planted], object]


@dataclass(frozen=True)
class Fault:
    name: str
    plant: Plant
    check: str
    # Checks the same edit necessarily fails as well (the expected one must still be among them).
    also: frozenset[str] = field(default_factory=frozenset)
    campaign: str = "throughput"  # "throughput", "optimizer", "local" or "capped"
    # Not caught yet: what will catch it. The row's test is a strict xfail until then.
    pending: str = ""


def _replace(**changes) -> Callable[[WorkerResult], WorkerResult]:
    return lambda r: msgspec.structs.replace(r, **changes)


# ------------------------------------------------------------------------ the faults
# 20m at contexts 512 and 1024; batches 1, 2, 4 fit and 8 is a CUDA OOM; 20m-c512 b2 is
# unstable (ten windows). Within a curve the largest stable batch is the fastest, so a
# rate edited at b1 of 20m-c1024 changes no summary.


def summary_rate_edited(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d["throughput"].update(tokens_per_second=d["throughput"]["tokens_per_second"] * 1.2))


def window_dropped(p: Planted) -> None:
    p.rewrite_result("20m-c1024", 1, lambda r: msgspec.structs.replace(r, windows=r.windows[:-1]))


def window_seconds_edited(p: Planted) -> None:
    p.edit_point("20m-c1024", 2, "result.json", lambda d: d["windows"][3].update(seconds=d["windows"][3]["seconds"] * 1.1))


def window_updates_edited(p: Planted) -> None:
    # One window ran one update more, its counters and figures made to agree.
    def change(r: WorkerResult) -> WorkerResult:
        ws = [w if i < 2 else msgspec.structs.replace(w, counter_after=w.counter_after + 1) for i, w in enumerate(r.windows)]
        ws[2] = msgspec.structs.replace(ws[2], updates=ws[2].updates + 1)
        return msgspec.structs.replace(r, windows=ws)

    p.rewrite_result("20m-c1024", 1, change)


def counter_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["windows"][2].update(counter_after=d["windows"][2]["counter_after"] + 1))


def calibration_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["calibration"].update(updates=d["calibration"]["updates"] + 1))


def learning_rate_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d["recipe"]["optimizer"].update(lr=0.002))


def rope_theta_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d["recipe"]["model"].update(rope_theta=500000.0))


def parameter_count_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.update(parameters=d["parameters"] + 1000))


def tokens_per_update_changed(p: Planted) -> None:
    p.edit_point("20m-c512", 4, "result.json", lambda d: d["recipe"]["training"].update(batch_tokens=4096))


def unstable_flag_flipped(p: Planted) -> None:
    p.edit_point("20m-c512", 2, "result.json", lambda d: d["throughput"].update(unstable=False))


def cv_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["throughput"].update(cv=d["throughput"]["cv"] * 1.5))


def sequences_per_second_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["throughput"].update(sequences_per_second=1.0))


def update_ms_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["throughput"].update(update_ms=d["throughput"]["update_ms"] / 2))


def mode_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d.update(mode="optimizer-timing"))


def result_protocol_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["protocol"].update(window_seconds=1.0))


def middle_point_made_oom(p: Planted) -> None:
    # A consistent forgery of the worker, the receipt and sacct: b2 of 20m-c512 "ran out of memory".
    p.edit_point("20m-c512", 2, "result.json", lambda d: d.update(outcome={"kind": "cuda_oom", "phase": "setup"}, exit_code=3))
    p.edit_point("20m-c512", 2, "receipt.json", lambda d: d["accounting"].update(state="FAILED", exit_code="3:0"))
    p.sacct_row("20m-c512", 2, state="FAILED", exit_code="3:0")


def attempt_duplicated(p: Planted) -> None:
    src = p.folder("20m-c512", 4)
    shutil.copytree(src, src.parent / "attempt-2")


def point_deleted(p: Planted) -> None:
    shutil.rmtree(p.folder("20m-c512", 2).parent)


def point_beyond_oom(p: Planted) -> None:
    # A point measured past the boundary, by a job sacct knows, with the right recipe.
    src = p.donor(contexts=(512,), first_oom=32).points["20m-c512"][16].parent
    shutil.copytree(src, p.folder("20m-c512", 4).parent.parent / "b16")


def point_beyond_cap(p: Planted) -> None:
    src = p.donor(contexts=(512,), first_oom=16).points["20m-c512"][8].parent
    shutil.copytree(src, p.folder("20m-c512", 4).parent.parent / "b8")
    # ...and the summary forged to match it.
    p.edit(RESULTS_JSON, lambda d: d["curves"][0].update(fitting_batches=[1, 2, 4, 8], largest_fitting_batch=8, fastest_stable_batch=8))


def manifest_protocol_edited(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d["protocol"].update(window_seconds=2.0))


def receipt_job_id_changed(p: Planted) -> None:
    def change(d: dict) -> None:
        d["job_id"] = "999"
        d["accounting"]["job_id"] = "999"

    p.edit_point("20m-c512", 2, "receipt.json", change)


def job_in_other_state(p: Planted) -> None:
    p.sacct_row("20m-c512", 1, state="CANCELLED", exit_code="0:15")


def receipt_state_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d["accounting"].update(state="TIMEOUT", exit_code="0:15"))


def job_with_other_resources(p: Planted) -> None:
    p.sacct_row("20m-c512", 1, alloc_tres="billing=2,cpu=2,mem=2G,node=1")


def job_with_other_name(p: Planted) -> None:
    p.sacct_row("20m-c512", 1, job_name="someone-else", comment="someone-else")


def frozen_file_edited(p: Planted) -> None:
    with open(p.built.root / "frozen" / "uv.lock", "a") as f:
        f.write("# edited\n")


def frozen_file_added(p: Planted) -> None:
    (p.built.root / "frozen" / "extra.py").write_text("x = 1\n")


def job_script_edited(p: Planted) -> None:
    with open(p.folder("20m-c512", 1) / "job.sh", "a") as f:
        f.write("echo edited\n")


def summary_state_edited(p: Planted) -> None:
    p.edit(RESULTS_JSON, lambda d: d["curves"][0].update(largest_fitting_batch=8, first_oom_batch=16))


def summary_unstable_edited(p: Planted) -> None:
    p.edit(RESULTS_JSON, lambda d: d["curves"][0].update(unstable_batches=[]))


def summary_fastest_edited(p: Planted) -> None:
    p.edit(RESULTS_JSON, lambda d: d["curves"][0].update(fastest_stable_batch=1))


H200 = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=150_754_820_096, gpu_count=1, gpu_uuid="GPU-0")


def faster_than_the_gpu(p: Planted) -> None:
    # Every point ran on an H200; one claims 2000x its rate, all its figures consistent:
    # 8.4M tok/s x 151M FLOP/token is about 1,270 TFLOP/s, above the 989 of the datasheet.
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, _replace(hardware=H200))
    p.rewrite_result(
        "20m-c1024", 1,
        lambda r: msgspec.structs.replace(r, windows=[msgspec.structs.replace(w, seconds=w.seconds / 2000) for w in r.windows]),
    )
    p.edit(RESULTS_JSON, lambda d: d["curves"][1].update(fastest_stable_batch=1))


def _on_gpus(p: Planted, other: dict[tuple[str, int], str]) -> None:
    """Every worker of the optimizer campaign on GPU-0, but the baselines named in `other`."""
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, _replace(hardware=H200))
            gpu = msgspec.structs.replace(H200, gpu_uuid=other.get((curve, batch), H200.gpu_uuid))
            p.rewrite_result(curve, batch, _replace(hardware=gpu), name="baseline.json")


def baseline_on_another_gpu(p: Planted) -> None:
    _on_gpus(p, {("20m-c1024", 2): "GPU-1"})


def baseline_of_another_recipe(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "baseline.json", lambda d: d["recipe"]["model"].update(rope_theta=500000.0))


def optimizer_burst_edited(p: Planted) -> None:
    path = p.folder("20m-c512", 2) / "bursts.jsonl"
    lines = path.read_text().splitlines()
    sample = json.loads(lines[3])
    sample["optimizer_ms"] *= 1.5
    lines[3] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")


def optimizer_ms_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 2, "result.json", lambda d: d["optimizer_timing"].update(optimizer_ms=d["optimizer_timing"]["optimizer_ms"] * 1.3))


def optimizer_point_missing(p: Planted) -> None:
    shutil.rmtree(p.folder("20m-c512", 2).parent)


def optimizer_inherited_edited(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d["inherited_batches"].update({"20m-c512": [1, 2]}))


def result_truncated(p: Planted) -> None:
    path = p.folder("20m-c1024", 1) / "result.json"
    path.write_bytes(path.read_bytes()[:200])


def result_deleted(p: Planted) -> None:
    (p.folder("20m-c1024", 8) / "result.json").unlink()


def intent_point_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "intent.json", lambda d: d["point"].update(batch_size=2))


def receipt_token_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d.update(token=d["token"] + "x"))


def curve_outside_the_manifest(p: Planted) -> None:
    src = p.donor(contexts=(256,)).points["20m-c256"][1].parent.parent
    shutil.copytree(src, p.built.root / "curves" / "20m-c256")


def concurrency_limit_lowered(p: Planted) -> None:
    # The manifest now says at most one job at a time; the jobs overlapped.
    p.edit(MANIFEST, lambda d: d["profile"].update(max_concurrent_jobs=1))


def receipt_elapsed_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d["accounting"].update(elapsed="00:00:30"))


def _with_flops(flops_delta: int = 0, mfu_factor: float = 1.0) -> Callable[[WorkerResult], WorkerResult]:
    """An H200 result carrying its FLOP/token and MFU (the builder's results do not)."""

    def change(r: WorkerResult) -> WorkerResult:
        fpt = flops_per_token(r.recipe.model) + flops_delta
        tp = msgspec.structs.replace(
            r.throughput, flops_per_token=float(fpt), peak_flops=989e12,
            mfu=mfu_factor * fpt * r.throughput.tokens_per_second / 989e12,
        )
        return msgspec.structs.replace(r, hardware=H200, throughput=tp)

    return change


def flops_per_token_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(flops_delta=1000))


def mfu_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(mfu_factor=1.5))


def _write_result(p: Planted, curve: str, batch: int, change: Callable[[WorkerResult], WorkerResult]) -> None:
    """An edit whose derived throughput figures are left as `change` makes them."""
    path = p.folder(curve, batch) / "result.json"
    path.write_bytes(msgspec.json.encode(change(msgspec.json.decode(path.read_bytes(), type=WorkerResult))))


def throughput_removed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.pop("throughput"))


def optimizer_timing_removed(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d.pop("optimizer_timing"))


def _timing(change: Callable[[dict], object]) -> Plant:
    return lambda p: p.edit_point("20m-c512", 1, "result.json", lambda d: change(d["optimizer_timing"]))


def optimizer_window_ms_edited(p: Planted) -> None:
    _timing(lambda t: t["window_optimizer_ms"].__setitem__(0, t["window_optimizer_ms"][0] * 1.2))(p)


def optimizer_graph_ms_edited(p: Planted) -> None:
    _timing(lambda t: t["window_graph_ms"].__setitem__(0, t["window_graph_ms"][0] * 1.2))(p)


def optimizer_cv_edited(p: Planted) -> None:
    _timing(lambda t: t.update(optimizer_cv=t["optimizer_cv"] * 2))(p)


def optimizer_unstable_flipped(p: Planted) -> None:
    _timing(lambda t: t.update(unstable=True))(p)


def optimizer_share_of_wall_edited(p: Planted) -> None:
    _timing(lambda t: t.update(share_of_wall=t["share_of_wall"] * 1.1))(p)


def optimizer_share_of_graph_edited(p: Planted) -> None:
    _timing(lambda t: t.update(share_of_graph=t["share_of_graph"] * 1.1))(p)


def optimizer_parent_hash_edited(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d["parent"].update(manifest_sha256="0" * 64))


def optimizer_burst_updates_edited(p: Planted) -> None:
    # One burst claims an update more, in the file and in the result alike.
    path = p.folder("20m-c512", 1) / "bursts.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["updates"] += 1
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["optimizer_timing"]["bursts"][0].update(updates=lines[0]["updates"]))


def windows_removed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.update(windows=[]))


def summary_not_json(p: Planted) -> None:
    (p.built.root / RESULTS_JSON).write_text("{")


def boundary_deleted(p: Planted) -> None:
    shutil.rmtree(p.folder("20m-c1024", 8).parent)


def frozen_list_emptied(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d.update(frozen_files=[]))


def fitting_point_retried(p: Planted) -> None:
    # A second, separately submitted attempt at a point whose first attempt fitted.
    src = p.donor(contexts=(512,)).points["20m-c512"][4]
    dst = p.folder("20m-c512", 4).parent / "attempt-2"
    shutil.copytree(src, dst)
    path = dst / "intent.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "point": {**json.loads(path.read_text())["point"], "attempt": 2}}))


FAULTS: list[Fault] = [
    Fault("a summary rate edited without its windows", summary_rate_edited, "throughput.median"),
    Fault("a window dropped (figures recomputed)", window_dropped, "windows.count"),
    Fault("a window's seconds edited", window_seconds_edited, "throughput.window_rates", frozenset({"throughput.cv", "throughput.median"})),
    Fault("a window's update count edited (counters and figures made to agree)", window_updates_edited, "windows.updates"),
    Fault("an optimizer counter edited", counter_edited, "windows.update_counter"),
    Fault("the calibration's update count edited", calibration_edited, "calibration.updates", frozenset({"windows.update_counter"})),
    Fault("the recipe's learning rate changed", learning_rate_changed, "recipe.protocol", frozenset({"recipe.frozen"})),
    Fault("a recipe field outside the protocol changed", rope_theta_changed, "recipe.frozen"),
    Fault("the parameter count changed", parameter_count_changed, "recipe.parameters"),
    Fault("tokens per update changed", tokens_per_update_changed, "recipe.tokens_per_update", frozenset({"recipe.frozen"})),
    Fault("the unstable flag flipped", unstable_flag_flipped, "throughput.unstable", frozenset({"summary.unstable"})),
    Fault("a CV edited", cv_edited, "throughput.cv"),
    Fault("sequences/s edited", sequences_per_second_edited, "throughput.sequences_per_second"),
    Fault("update ms edited", update_ms_edited, "throughput.update_ms"),
    Fault("a rate beyond the GPU's datasheet peak (figures consistent)", faster_than_the_gpu, "throughput.roofline"),
    Fault("a result's mode edited", mode_edited, "result.mode"),
    Fault("a result's protocol edited", result_protocol_edited, "result.protocol"),
    Fault("a middle point turned into a CUDA OOM", middle_point_made_oom, "curve.after_end", frozenset({"summary.curve", "summary.unstable", "summary.fastest"})),
    Fault("a duplicated attempt", attempt_duplicated, "slurm.duplicate_job", frozenset({"attempt.intent", "curve.attempts"})),
    Fault("a point deleted from a curve", point_deleted, "curve.contiguous", frozenset({"curve.after_end", "curve.finished", "summary.curve", "summary.fastest", "summary.unstable"})),
    Fault("a point added beyond the OOM boundary", point_beyond_oom, "curve.after_end"),
    Fault("a point added beyond a cap", point_beyond_cap, "curve.cap", campaign="capped"),
    Fault("the manifest's protocol edited", manifest_protocol_edited, "result.protocol"),
    Fault("a receipt's job id changed", receipt_job_id_changed, "slurm.accounted"),
    Fault(
        "a receipt's job id changed (local scheduler)", receipt_job_id_changed, "local.accounted", campaign="local",
        pending="issue 17 part 1: the audit of local campaigns against the local scheduler's registry",
    ),
    Fault("sacct says the job ended otherwise", job_in_other_state, "slurm.state", frozenset({"slurm.receipt_accounting"})),
    Fault("the receipt's recorded state edited", receipt_state_edited, "receipt.state", frozenset({"slurm.receipt_accounting"})),
    Fault("the job ran with other resources", job_with_other_resources, "slurm.allocation"),
    Fault("the job id names another job", job_with_other_name, "slurm.identity"),
    Fault("a frozen file edited", frozen_file_edited, "frozen.sha256"),
    Fault("a file added to frozen/", frozen_file_added, "frozen.unlisted"),
    Fault("a job script edited", job_script_edited, "attempt.job_script"),
    Fault("a curve's summary edited", summary_state_edited, "summary.curve"),
    Fault("the summary's unstable batches edited", summary_unstable_edited, "summary.unstable"),
    Fault("the summary's fastest batch edited", summary_fastest_edited, "summary.fastest"),
    Fault("a baseline measured on another GPU than its instrumented pair", baseline_on_another_gpu, "optimizer.same_gpu", campaign="optimizer"),
    Fault("a baseline of another recipe", baseline_of_another_recipe, "optimizer.baseline", campaign="optimizer"),
    Fault("an ok result without windows", windows_removed, "windows.present"),
    Fault("results.json not JSON", summary_not_json, "summary"),
    Fault("the OOM that ended a curve deleted", boundary_deleted, "curve.finished", frozenset({"summary.curve"})),
    Fault("the manifest's list of frozen files emptied", frozen_list_emptied, "frozen.listed", frozenset({"frozen.unlisted"})),
    Fault("a fitting point retried", fitting_point_retried, "curve.attempts"),
    Fault("a result file truncated", result_truncated, "files.decode", frozenset({"curve.after_end", "curve.contiguous", "curve.finished", "summary.curve", "summary.fastest"})),
    Fault("the boundary's result deleted", result_deleted, "attempt.result", frozenset({"curve.finished", "summary.curve"})),
    Fault("an intent's point edited", intent_point_edited, "attempt.intent"),
    Fault("a receipt's token edited", receipt_token_edited, "attempt.receipt"),
    Fault("a curve outside the manifest", curve_outside_the_manifest, "curve.unexpected"),
    Fault("the concurrency limit lowered (Slurm)", concurrency_limit_lowered, "slurm.peak_concurrency"),
    Fault("the concurrency limit lowered (local)", concurrency_limit_lowered, "local.peak_concurrency", campaign="local"),
    Fault(
        "a receipt's recorded elapsed time edited", receipt_elapsed_edited, "slurm.receipt_accounting",
        pending="issue 17 part 7: every published accounting figure against sacct",
    ),
    Fault("FLOP/token edited", flops_per_token_edited, "throughput.flops_per_token", frozenset({"throughput.mfu"})),
    Fault("MFU edited", mfu_edited, "throughput.mfu"),
    Fault("an ok result without throughput figures", throughput_removed, "throughput.present"),
    Fault("an ok optimizer result without its timing", optimizer_timing_removed, "optimizer.timing", campaign="optimizer"),
    Fault("a window's optimizer ms edited", optimizer_window_ms_edited, "optimizer.window_ms", campaign="optimizer"),
    Fault("a window's graph ms edited", optimizer_graph_ms_edited, "optimizer.window_graph_ms", campaign="optimizer"),
    Fault("the optimizer CV edited", optimizer_cv_edited, "optimizer.cv", campaign="optimizer"),
    Fault("the optimizer unstable flag flipped", optimizer_unstable_flipped, "optimizer.unstable", campaign="optimizer"),
    Fault("the optimizer share of wall time edited", optimizer_share_of_wall_edited, "optimizer.share_of_wall", campaign="optimizer"),
    Fault("the optimizer share of graph time edited", optimizer_share_of_graph_edited, "optimizer.share_of_graph", campaign="optimizer"),
    Fault("the parent's manifest hash edited", optimizer_parent_hash_edited, "optimizer.parent", campaign="optimizer"),
    Fault(
        "a burst's update count edited", optimizer_burst_updates_edited, "optimizer.burst_updates",
        frozenset({"optimizer.cv", "optimizer.window_graph_ms", "optimizer.window_ms"}), campaign="optimizer",
    ),
    Fault("an optimizer burst edited", optimizer_burst_edited, "optimizer.bursts", frozenset({"optimizer.window_ms", "optimizer.median_ms", "optimizer.cv", "optimizer.share_of_graph", "optimizer.share_of_wall"}), campaign="optimizer"),
    Fault("the optimizer median edited", optimizer_ms_edited, "optimizer.median_ms", campaign="optimizer"),
    Fault("an inherited optimizer point deleted", optimizer_point_missing, "optimizer.grid", campaign="optimizer"),
    Fault("the inherited grid edited", optimizer_inherited_edited, "optimizer.inherited", frozenset({"optimizer.grid"}), campaign="optimizer"),
]


# ------------------------------------------------------------------------ planting


def _build(tmp_path: Path, kind: str) -> Planted:
    if kind == "optimizer":
        parent = build_throughput(tmp_path / "tp", unstable={"20m-c512": [2]})
        opt = build_optimizer(tmp_path / "opt", parent)
        return Planted(built=opt, sacct=opt.sacct(), tmp=tmp_path, parent=parent)
    if kind == "capped":
        built = build_throughput(tmp_path / "tp", contexts=(512,), first_oom=16)
        # The same points with --max-batch 4 would have stopped at b4: remove b8 and the OOM.
        for b in (8, 16):
            shutil.rmtree(built.points["20m-c512"][b].parent)
            del built.points["20m-c512"][b]
        manifest = json.loads((built.root / MANIFEST).read_text())
        manifest["max_batch"] = 4
        (built.root / MANIFEST).write_text(json.dumps(manifest))
        summary = json.loads((built.root / RESULTS_JSON).read_text())
        summary["curves"][0].update(state="capped", first_oom_batch=None, fitting_batches=[1, 2, 4], largest_fitting_batch=4, fastest_stable_batch=4)
        (built.root / RESULTS_JSON).write_text(json.dumps(summary))
        return Planted(built=built, sacct=built.sacct(), tmp=tmp_path)
    built = build_throughput(tmp_path / "tp", unstable={"20m-c512": [2]}, scheduler="local" if kind == "local" else "slurm")
    return Planted(built=built, sacct=built.sacct(), tmp=tmp_path)


def failed_checks(p: Planted) -> set[str]:
    out = run_audit(p.built.root, runner=p.sacct, settle_seconds=0)
    return {c.name for c in out.report.checks if c.status == "fail"}


def caught(fault: Fault, tmp_path: Path) -> tuple[bool, set[str]]:
    """Whether the audit caught `fault` by its check, and nothing it should not have failed."""
    p = _build(tmp_path, fault.campaign)
    fault.plant(p)
    failed = failed_checks(p)
    return fault.check in failed and failed <= {fault.check, *fault.also}, failed


@pytest.mark.parametrize("kind", ["throughput", "optimizer", "capped", "local"])
def test_unplanted_campaigns_pass(tmp_path, kind):
    assert failed_checks(_build(tmp_path, kind)) == set()


def _row(fault: Fault):
    marks = [pytest.mark.xfail(reason=f"not caught yet: {fault.pending}", strict=True)] if fault.pending else []
    return pytest.param(fault, id=f"{fault.plant.__name__}-{fault.campaign}", marks=marks)


@pytest.mark.parametrize("fault", [_row(f) for f in FAULTS])
def test_planted_fault_is_caught_by_its_check(tmp_path, fault):
    ok, failed = caught(fault, tmp_path)
    assert fault.check in failed, f"{fault.name}: not caught by {fault.check}; failed {sorted(failed)}"
    assert ok, f"{fault.name}: {fault.check} failed, and also {sorted(failed - {fault.check} - fault.also)}"


def test_roofline_is_not_applicable_for_an_unknown_gpu_and_passes_a_real_rate(tmp_path):
    p = _build(tmp_path, "throughput")
    unknown = msgspec.structs.replace(H200, gpu_name="NVIDIA RTX 9090")
    p.rewrite_result("20m-c512", 1, _replace(hardware=unknown))
    p.rewrite_result("20m-c512", 2, _replace(hardware=H200))
    checks = {c.file: c for c in run_audit(p.built.root, runner=p.sacct, settle_seconds=0).report.checks if c.name == "throughput.roofline"}
    na = checks["curves/20m-c512/b1/attempt-1/result.json"]
    assert na.status == "not_applicable" and "'NVIDIA RTX 9090' with 140.4 GiB: no datasheet BF16 peak known" in na.message
    ok = checks["curves/20m-c512/b2/attempt-1/result.json"]
    assert ok.status == "pass" and "within the NVIDIA H200 dense BF16 peak 989 TFLOP/s" in ok.message


def test_each_row_names_a_distinct_fault():
    names = [f.name for f in FAULTS]
    assert len(set(names)) == len(names)
    assert len({(f.plant, f.campaign) for f in FAULTS}) == len(FAULTS)


DOC = Path(__file__).resolve().parents[3] / "docs" / "reliability.md"


def share_line() -> str:
    """The audit's figure: the share of planted faults its checks catch (the rows' tests prove each)."""
    caught_now = sum(1 for f in FAULTS if not f.pending)
    return f"{caught_now} of {len(FAULTS)} planted faults caught ({caught_now / len(FAULTS):.0%})"


def table() -> str:
    """The table docs/reliability.md shows: fault, campaign, the check that catches it."""
    rows = ["| planted fault | campaign | caught by | also failing |", "|---|---|---|---|"]
    for f in FAULTS:
        caught_by = f"not caught yet ({f.pending})" if f.pending else f"`{f.check}`"
        also = ", ".join(f"`{c}`" for c in sorted(f.also))
        rows.append(f"| {f.name} | {f.campaign} | {caught_by} | {also} |")
    return "\n".join(rows) + "\n"


def audit_check_names() -> set[str]:
    """Every check name the audit's source passes to Checks (the "slurm" line is only ever not applicable)."""
    import re

    import throughput_audit

    src = Path(throughput_audit.__file__).parent
    found = set()
    for path in src.glob("*.py"):
        found |= set(re.findall(r'checks\.(?:expect|fail|not_applicable)\(\s*"([a-z_.]+)"', path.read_text()))
    return found - {"slurm"}


def unplanted_line() -> str:
    unplanted = audit_check_names() - {f.check for f in FAULTS if not f.pending}
    return "Checks without a fault that they catch yet: " + ", ".join(f"`{c}`" for c in sorted(unplanted)) + "."


def test_reliability_doc_states_the_table_and_the_share():
    text = " ".join(DOC.read_text().split())
    assert share_line() in text, f"docs/reliability.md must say: {share_line()}"
    assert unplanted_line() in text, f"docs/reliability.md must say: {unplanted_line()}"
    text = DOC.read_text()
    assert table() in text, "docs/reliability.md's fault table differs from FAULTS: regenerate it (python THIS_FILE --table)"


if __name__ == "__main__":
    if "--table" in sys.argv:
        print(table() + "\n" + unplanted_line())
        sys.exit(0)
    import tempfile

    hit = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, fault in enumerate(FAULTS):
            (Path(tmp) / f"f{i}").mkdir()
            hit += caught(fault, Path(tmp) / f"f{i}")[0]
    print(f"{hit} of {len(FAULTS)} planted faults caught ({hit / len(FAULTS):.0%}); the documented figure: {share_line()}")
    for f in FAULTS:
        if f.pending:
            print(f"not caught yet: {f.name} ({f.pending})")
    sys.exit(0 if hit == sum(1 for f in FAULTS if not f.pending) else 1)
