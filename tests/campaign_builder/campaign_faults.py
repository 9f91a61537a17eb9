"""Faults in the campaign around its points (the manifest, curves, attempts, receipts,
the scheduler's accounting, frozen files and the summary) for the audit's planted-fault
table (packages/throughput-audit/tests/test_planted_faults.py); faults in one point's
own files are in `faults`.
"""

from __future__ import annotations

import json
import shutil

import msgspec

from campaign_builder.fake_sacct import FakeSacct
from campaign_builder.files import receipt_ended
from campaign_builder.planting import Planted
from throughput_schema import CurveClosure, Settlement, write_atomic
from throughput_schema.layout import MANIFEST, RESULTS_JSON, closure_path
from throughput_schema.local_jobs import LOCAL_JOBS_DIR


def middle_point_made_oom(p: Planted) -> None:
    # A consistent forgery of the worker, the receipt and sacct: b2 of 20m-c512 "ran out of memory".
    p.edit_point(
        "20m-c512", 2, "result.json", lambda d: d.update(outcome={"kind": "cuda_oom", "phase": "setup"}, exit_code=3)
    )
    p.edit_point("20m-c512", 2, "receipt.json", lambda d: receipt_ended(d, "FAILED", "3:0"))
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
    p.edit(
        RESULTS_JSON,
        lambda d: d["curves"][0].update(fitting_batches=[1, 2, 4, 8], largest_fitting_batch=8, fastest_stable_batch=8),
    )


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
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: receipt_ended(d, "TIMEOUT", "0:15"))


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


def optimizer_point_missing(p: Planted) -> None:
    shutil.rmtree(p.folder("20m-c512", 2).parent)


def optimizer_inherited_edited(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d["inherited_batches"].update({"20m-c512": [1, 2]}))


def result_deleted(p: Planted) -> None:
    (p.folder("20m-c1024", 8) / "result.json").unlink()


def token_submitted_twice(p: Planted) -> None:
    # Not a file edit: sacct holds a second job under b2's token, as after a duplicate
    # sbatch of one intent or a crash between sbatch and the receipt; no receipt names it.
    job = p.job("20m-c512", 2)
    p.sacct.rows["4242"] = msgspec.structs.replace(p.sacct.rows[job], job_id="4242")


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
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d["accounting"].update(elapsed_seconds=30.0))


def optimizer_parent_hash_edited(p: Planted) -> None:
    p.edit(MANIFEST, lambda d: d["parent"].update(manifest_sha256="0" * 64))


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
    path.write_text(
        json.dumps({**json.loads(path.read_text()), "point": {**json.loads(path.read_text())["point"], "attempt": 2}})
    )


def receipt_from_another_scheduler(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "receipt.json", lambda d: d.update(scheduler="local"))


def curves_folder_deleted(p: Planted) -> None:
    shutil.rmtree(p.built.root / "curves")


def optimizer_contexts_edited(p: Planted) -> None:
    # The follow-up claims a context its parent never measured.
    p.edit(MANIFEST, lambda d: d.update(contexts=[*d["contexts"], 2048]))


def bounded_curve_closed_by_hand(p: Planted) -> None:
    # A closure makes a curve "closed" in the report; this curve ended at a CUDA OOM.
    write_atomic(
        closure_path(p.built.root, "20m-c512"),
        CurveClosure(
            curve="20m-c512",
            batch_size=8,
            attempt=1,
            outcome="host_oom",
            reason="planted",
            closed_at="2026-10-08T13:00:00+00:00",
            user="someone",
            host="login1",
        ),
    )


class _UnreachableSacct(FakeSacct):
    def __call__(self, argv):
        from subprocess import CompletedProcess

        return CompletedProcess(list(argv), 1, "", "sacct: error: slurmdbd: Connection refused\n")


def accounting_unreachable(p: Planted) -> None:
    # Not a file edit: the audit must fail, not pass, when it cannot ask Slurm.
    p.sacct = _UnreachableSacct(p.sacct.rows)


class _SilentlyFailingSacct(FakeSacct):
    def __call__(self, argv):
        from subprocess import CompletedProcess

        # Slurm before 23.11.4 with slurmdbd down: exit 0, no rows, the error on stderr only.
        return CompletedProcess(
            list(argv), 0, "", "sacct: error: Problem talking to the database: Connection refused\n"
        )


def accounting_error_with_exit_0(p: Planted) -> None:
    p.sacct = _SilentlyFailingSacct(p.sacct.rows)


def _dateless(iso: str) -> str:
    """What SLURM_TIME_FORMAT=relative prints for a time of today: '19:19:41'."""
    return iso[11:19]


def receipt_times_without_a_date(p: Planted) -> None:
    # A campaign run with SLURM_TIME_FORMAT=relative stored its receipts' times so.
    p.edit_point(
        "20m-c512",
        1,
        "receipt.json",
        lambda d: d["accounting"].update(
            start=_dateless(d["accounting"]["start"]), end=_dateless(d["accounting"]["end"])
        ),
    )


def sacct_times_without_a_date(p: Planted) -> None:
    row = p.sacct.rows[p.job("20m-c512", 1)]
    p.sacct_row("20m-c512", 1, start=_dateless(row.start), end=_dateless(row.end))


def job_with_less_memory_in_another_unit(p: Planted) -> None:
    row = p.sacct.rows[p.job("20m-c512", 1)]
    p.sacct_row("20m-c512", 1, alloc_tres=row.alloc_tres.replace("mem=64G", "mem=32768M"))


def never_submitted_attempt_with_a_result(p: Planted) -> None:
    # Attempt 1 is said never to have reached the scheduler, yet holds a receipt and a
    # result; the point's counted attempt is a genuine attempt 2.
    first = p.folder("20m-c512", 4)
    second = first.parent / "attempt-2"
    shutil.copytree(p.donor(contexts=(512,)).points["20m-c512"][4], second)
    intent = json.loads((second / "intent.json").read_text())
    intent["point"]["attempt"] = 2
    (second / "intent.json").write_text(json.dumps(intent))
    write_atomic(
        first / "settlement.json",
        Settlement(
            token=json.loads((first / "intent.json").read_text())["token"],
            state="never-submitted",
            reason="planted",
            decided_at="2026-10-08T12:10:00+00:00",
        ),
    )


def _registry_entry(p: Planted, curve: str, batch: int) -> str:
    return f"{LOCAL_JOBS_DIR}/{p.job(curve, batch)}.json"


def registry_request_edited(p: Planted) -> None:
    p.edit(_registry_entry(p, "20m-c512", 2), lambda d: d.update(cpus=2))


def registry_unreadable(p: Planted) -> None:
    (p.built.root / _registry_entry(p, "20m-c512", 2)).write_bytes(bytes(range(256)))
