"""The faults of the audit's planted-fault table (packages/throughput-audit/tests/
test_planted_faults.py): each edits a finished campaign (see `planting.Planted`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable

import msgspec

from throughput_schema import CurveClosure, WorkerResult, write_atomic
from throughput_schema.layout import MANIFEST, RESULTS_JSON, closure_path
from throughput_schema.recipe import flops_per_token

from campaign_builder.complete import FakeSacct
from campaign_builder.planting import H200, Plant, Planted, replace_fields

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


def faster_than_the_gpu(p: Planted) -> None:
    # Every point ran on an H200; one claims 2000x its rate, all its figures consistent:
    # 8.4M tok/s x 151M FLOP/token is about 1,270 TFLOP/s, above the 989 of the datasheet.
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, replace_fields(hardware=H200))
    p.rewrite_result(
        "20m-c1024", 1,
        lambda r: msgspec.structs.replace(r, windows=[msgspec.structs.replace(w, seconds=w.seconds / 2000) for w in r.windows]),
    )
    p.edit(RESULTS_JSON, lambda d: d["curves"][1].update(fastest_stable_batch=1))


def _on_gpus(p: Planted, other: dict[tuple[str, int], str]) -> None:
    """Every worker of the optimizer campaign on GPU-0, but the baselines named in `other`."""
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, replace_fields(hardware=H200))
            gpu = msgspec.structs.replace(H200, gpu_uuid=other.get((curve, batch), H200.gpu_uuid))
            p.rewrite_result(curve, batch, replace_fields(hardware=gpu), name="baseline.json")


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


def _with_flops(flops_delta: int = 0, mfu_factor: float = 1.0, peak: float = 989e12) -> Callable[[WorkerResult], WorkerResult]:
    """An H200 result carrying its FLOP/token and MFU (the builder's results do not)."""

    def change(r: WorkerResult) -> WorkerResult:
        fpt = flops_per_token(r.recipe.model) + flops_delta
        tp = msgspec.structs.replace(
            r.throughput, flops_per_token=float(fpt), peak_flops=peak,
            mfu=mfu_factor * fpt * r.throughput.tokens_per_second / peak,
        )
        return msgspec.structs.replace(r, hardware=H200, throughput=tp)

    return change


def flops_per_token_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(flops_delta=1000))


def mfu_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(mfu_factor=1.5))


def mfu_peak_edited(p: Planted) -> None:
    # A lower MFU, consistently computed from a peak twice the datasheet's.
    _write_result(p, "20m-c512", 1, _with_flops(peak=2 * 989e12))


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


def summary_binary(p: Planted) -> None:
    (p.built.root / RESULTS_JSON).write_bytes(bytes(range(256)))


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


def receipt_from_another_scheduler(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d.update(scheduler="local"))


def curves_folder_deleted(p: Planted) -> None:
    shutil.rmtree(p.built.root / "curves")


def optimizer_contexts_edited(p: Planted) -> None:
    # The follow-up claims a context its parent never measured.
    p.edit(MANIFEST, lambda d: d.update(contexts=[*d["contexts"], 2048]))


def bounded_curve_closed_by_hand(p: Planted) -> None:
    # A closure makes a curve "closed" in the report; this curve ended at a CUDA OOM.
    write_atomic(closure_path(p.built.root, "20m-c512"), CurveClosure(
        curve="20m-c512", batch_size=8, attempt=1, outcome="host_oom", reason="planted",
        closed_at="2026-10-08T13:00:00+00:00", user="someone", host="login1",
    ))


class _UnreachableSacct(FakeSacct):
    def __call__(self, argv):
        from subprocess import CompletedProcess

        return CompletedProcess(list(argv), 1, "", "sacct: error: slurmdbd: Connection refused\n")


def accounting_unreachable(p: Planted) -> None:
    # Not a file edit: the audit must fail, not pass, when it cannot ask Slurm.
    p.sacct = _UnreachableSacct(p.sacct.rows)
