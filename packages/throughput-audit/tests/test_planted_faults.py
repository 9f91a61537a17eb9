"""The audit's planted-fault suite: one fault per row, planted in a finished campaign built
on the CPU, and the check that must catch it.

A row is (fault, function that edits the campaign, the check expected to fail, other
checks the same edit cannot help failing). A row passes only when nothing but the
expected check and the listed others fail, so each proves that its check catches
something the rest would not. A fault not caught yet names what will catch it
(`pending`) and is a strict xfail until then. The share of rows caught is the audit's
figure, stated with the table in docs/reliability.md ("What the audit catches"), which a
test keeps equal to this file: `PYTHONPATH=tests python THIS_FILE` re-plants every fault
and prints the share, `--table` the table. To add a fault: a function in
tests/campaign_builder/faults.py (a point's own files) or campaign_faults.py (the rest),
and one row here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from campaign_builder import cache_faults
from campaign_builder import campaign_faults as campaign
from campaign_builder import faults as edits
from campaign_builder.planting import H200, Fault, build, caught, failed_checks, replace_fields
from throughput_audit.audit import run_audit

# fmt: off
FAULTS: list[Fault] = [
    Fault("a summary rate edited without its windows", edits.summary_rate_edited, "throughput.median"),
    Fault("a window dropped (figures recomputed)", edits.window_dropped, "windows.count"),
    Fault("a window's seconds edited", edits.window_seconds_edited, "throughput.window_rates", frozenset({"throughput.cv", "throughput.median"})),
    Fault("a window's update count edited (counters and figures made to agree)", edits.window_updates_edited, "windows.updates"),
    Fault("an optimizer counter edited", edits.counter_edited, "windows.update_counter"),
    Fault("the calibration's update count edited", edits.calibration_edited, "calibration.updates", frozenset({"windows.update_counter"})),
    Fault("the recipe's learning rate changed", edits.learning_rate_changed, "recipe.protocol", frozenset({"recipe.frozen"})),
    Fault("a recipe field outside the protocol changed", edits.rope_theta_changed, "recipe.frozen"),
    Fault("the parameter count changed", edits.parameter_count_changed, "recipe.parameters"),
    Fault("tokens per update changed", edits.tokens_per_update_changed, "recipe.tokens_per_update", frozenset({"recipe.frozen"})),
    Fault("the unstable flag flipped", edits.unstable_flag_flipped, "throughput.unstable", frozenset({"summary.unstable"})),
    Fault("a CV edited", edits.cv_edited, "throughput.cv"),
    Fault("sequences/s edited", edits.sequences_per_second_edited, "throughput.sequences_per_second"),
    Fault("update ms edited", edits.update_ms_edited, "throughput.update_ms"),
    Fault("a rate beyond the GPU's datasheet peak (figures consistent)", edits.faster_than_the_gpu, "throughput.roofline"),
    Fault("a result's mode edited", edits.mode_edited, "result.mode"),
    Fault("a result's protocol edited", edits.result_protocol_edited, "result.protocol"),
    Fault("a point's precision edited", edits.precision_edited, "precision.request", frozenset({"recipe.protocol", "recipe.frozen", "precision.fp8_linears"})),
    Fault("FP8 linears recorded on a BF16 point", edits.fp8_linears_on_a_bf16_point, "precision.fp8_linears"),
    Fault("a point's optimizer edited", edits.optimizer_edited, "optimizer.request", frozenset({"recipe.protocol", "recipe.frozen", "optimizer.owned"})),
    Fault("a setup phase shortened", edits.setup_phase_edited, "setup.phases"),
    Fault("a setup longer than its job ran", edits.setup_longer_than_its_job, "setup.inside_run"),
    Fault("a warm setup naming another point's compiled artifact", cache_faults.warm_setup_of_another_point, "setup.cache"),
    Fault("a Muon split recorded on an AdamW point", edits.muon_split_on_an_adamw_point, "optimizer.owned"),
    Fault("a middle point turned into a CUDA OOM", campaign.middle_point_made_oom, "curve.after_end", frozenset({"summary.curve", "summary.unstable", "summary.fastest"})),
    Fault("a duplicated attempt", campaign.attempt_duplicated, "slurm.duplicate_job", frozenset({"attempt.intent", "curve.attempts"})),
    Fault("a point deleted from a curve", campaign.point_deleted, "curve.contiguous", frozenset({"curve.after_end", "curve.finished", "summary.curve", "summary.fastest", "summary.unstable"})),
    Fault("a point added beyond the OOM boundary", campaign.point_beyond_oom, "curve.after_end"),
    Fault("a point added beyond a cap", campaign.point_beyond_cap, "curve.cap", campaign="capped"),
    Fault("the manifest's protocol edited", campaign.manifest_protocol_edited, "result.protocol"),
    Fault("a receipt's job id changed", campaign.receipt_job_id_changed, "slurm.accounted", frozenset({"slurm.unreceipted"})),
    Fault("a receipt's job id changed (local scheduler)", campaign.receipt_job_id_changed, "local.accounted", frozenset({"local.unreceipted"}), campaign="local"),
    Fault("the registry's request for a job edited", campaign.registry_request_edited, "local.allocation", campaign="local"),
    Fault("a registry entry replaced by binary bytes", campaign.registry_unreadable, "local.registry", campaign="local"),
    Fault("an intent's token submitted twice (no receipt names the second job)", campaign.token_submitted_twice, "slurm.unreceipted"),
    Fault("sacct says the job ended otherwise", campaign.job_in_other_state, "slurm.state", frozenset({"slurm.receipt_accounting"})),
    Fault("the receipt's recorded state edited", campaign.receipt_state_edited, "receipt.state", frozenset({"slurm.receipt_accounting"})),
    Fault("the job ran with other resources", campaign.job_with_other_resources, "slurm.allocation", frozenset({"slurm.receipt_accounting"})),
    Fault("the job id names another job", campaign.job_with_other_name, "slurm.identity", frozenset({"slurm.receipt_accounting"})),
    Fault("a frozen file edited", campaign.frozen_file_edited, "frozen.sha256"),
    Fault("a file added to frozen/", campaign.frozen_file_added, "frozen.unlisted"),
    Fault("a job script edited", campaign.job_script_edited, "attempt.job_script"),
    Fault("a never-submitted attempt holding a result", campaign.never_submitted_attempt_with_a_result, "attempt.void"),
    Fault("a bounded curve closed by hand", campaign.bounded_curve_closed_by_hand, "curve.closure"),
    Fault("Slurm accounting unreachable", campaign.accounting_unreachable, "slurm.sacct"),
    Fault("Slurm accounting failing with exit 0 (an error on stderr only)", campaign.accounting_error_with_exit_0, "slurm.sacct"),
    Fault("a receipt's times recorded without a date (SLURM_TIME_FORMAT=relative)", campaign.receipt_times_without_a_date, "receipt.times", frozenset({"slurm.receipt_accounting"})),
    Fault("sacct's times without a date", campaign.sacct_times_without_a_date, "slurm.worker_times", frozenset({"slurm.peak_concurrency", "slurm.receipt_accounting"})),
    Fault("the job given less memory than asked (in another unit)", campaign.job_with_less_memory_in_another_unit, "slurm.allocation", frozenset({"slurm.receipt_accounting"})),
    Fault("a curve's summary edited", campaign.summary_state_edited, "summary.curve"),
    Fault("the summary's unstable batches edited", campaign.summary_unstable_edited, "summary.unstable"),
    Fault("the summary's fastest batch edited", campaign.summary_fastest_edited, "summary.fastest"),
    Fault("a baseline measured on another GPU than its instrumented pair", edits.baseline_on_another_gpu, "optimizer.same_gpu", campaign="optimizer"),
    Fault("a baseline of another recipe", edits.baseline_of_another_recipe, "optimizer.baseline", campaign="optimizer"),
    Fault("an ok result without windows", edits.windows_removed, "windows.present"),
    Fault("results.json not JSON", campaign.summary_not_json, "summary"),
    Fault("a receipt from another scheduler", campaign.receipt_from_another_scheduler, "slurm.receipt", frozenset({"attempt.receipt"})),
    Fault("the curves folder deleted", campaign.curves_folder_deleted, "files.curves",
          frozenset({"curve.finished", "summary.curve", "summary.fastest", "summary.unstable", "slurm.peak_concurrency"})),
    Fault("the follow-up's contexts edited", campaign.optimizer_contexts_edited, "optimizer.parent_grid", campaign="optimizer"),
    Fault("results.json replaced by binary bytes", campaign.summary_binary, "summary"),
    Fault("the OOM that ended a curve deleted", campaign.boundary_deleted, "curve.finished", frozenset({"summary.curve"})),
    Fault("the manifest's list of frozen files emptied", campaign.frozen_list_emptied, "frozen.listed", frozenset({"frozen.unlisted"})),
    Fault("a fitting point retried", campaign.fitting_point_retried, "curve.attempts"),
    Fault("a result file truncated", edits.result_truncated, "files.decode", frozenset({"curve.after_end", "curve.contiguous", "curve.finished", "summary.curve", "summary.fastest"})),
    Fault("the boundary's result deleted", campaign.result_deleted, "attempt.result", frozenset({"curve.finished", "summary.curve"})),
    Fault("an intent's point edited", campaign.intent_point_edited, "attempt.intent"),
    Fault("a receipt's token edited", campaign.receipt_token_edited, "attempt.receipt"),
    Fault("a curve outside the manifest", campaign.curve_outside_the_manifest, "curve.unexpected"),
    Fault("the concurrency limit lowered (Slurm)", campaign.concurrency_limit_lowered, "slurm.peak_concurrency"),
    Fault("the concurrency limit lowered (local)", campaign.concurrency_limit_lowered, "local.peak_concurrency", campaign="local"),
    Fault("a receipt's recorded elapsed time edited", campaign.receipt_elapsed_edited, "slurm.receipt_accounting", frozenset({"setup.inside_run"})),
    Fault("FLOP/token edited", edits.flops_per_token_edited, "throughput.flops_per_token", frozenset({"throughput.mfu"})),
    Fault("MFU edited", edits.mfu_edited, "throughput.mfu"),
    Fault("MFU computed from another peak", edits.mfu_peak_edited, "throughput.peak_flops"),
    Fault("an ok result without throughput figures", edits.throughput_removed, "throughput.present"),
    Fault("an ok optimizer result without its timing", edits.optimizer_timing_removed, "optimizer.timing", campaign="optimizer"),
    Fault("a window's optimizer ms edited", edits.optimizer_window_ms_edited, "optimizer.window_ms", campaign="optimizer"),
    Fault("a window's graph ms edited", edits.optimizer_graph_ms_edited, "optimizer.window_graph_ms", campaign="optimizer"),
    Fault("the optimizer CV edited", edits.optimizer_cv_edited, "optimizer.cv", campaign="optimizer"),
    Fault("the optimizer unstable flag flipped", edits.optimizer_unstable_flipped, "optimizer.unstable", campaign="optimizer"),
    Fault("the optimizer share of wall time edited", edits.optimizer_share_of_wall_edited, "optimizer.share_of_wall", campaign="optimizer"),
    Fault("the optimizer share of graph time edited", edits.optimizer_share_of_graph_edited, "optimizer.share_of_graph", campaign="optimizer"),
    Fault("the parent's manifest hash edited", campaign.optimizer_parent_hash_edited, "optimizer.parent", campaign="optimizer"),
    Fault(
        "a burst's update count edited", edits.optimizer_burst_updates_edited, "optimizer.burst_updates",
        frozenset({"optimizer.cv", "optimizer.window_graph_ms", "optimizer.window_ms"}), campaign="optimizer",
    ),
    Fault("an optimizer slower than the whole update (figures consistent)", edits.optimizer_slower_than_the_update, "optimizer.primary_percent", campaign="optimizer"),
    Fault("an optimizer burst edited", edits.optimizer_burst_edited, "optimizer.bursts", frozenset({"optimizer.window_ms", "optimizer.median_ms", "optimizer.cv", "optimizer.share_of_graph", "optimizer.share_of_wall"}), campaign="optimizer"),
    Fault("the optimizer median edited", edits.optimizer_ms_edited, "optimizer.median_ms", campaign="optimizer"),
    Fault("an inherited optimizer point deleted", campaign.optimizer_point_missing, "optimizer.grid", campaign="optimizer"),
    Fault("the inherited grid edited", campaign.optimizer_inherited_edited, "optimizer.inherited", frozenset({"optimizer.grid"}), campaign="optimizer"),
    Fault("a window's energy doubled (its derived joules, against its raw readings)", edits.window_energy_doubled, "energy.window_joules", campaign="energy"),
    Fault("a window's power above the power limit (figures consistent)", edits.power_above_the_limit, "energy.power_limit", campaign="energy"),
    Fault("the energy counter going backwards between windows (figures consistent)", edits.counter_backwards_between_windows, "energy.counter", campaign="energy"),
    Fault("the energy counter going backwards within a window (figures consistent)", edits.counter_backwards_within_a_window, "energy.counter", frozenset({"energy.power"}), campaign="energy"),
    Fault("a window that counted no energy (figures consistent)", edits.window_without_energy, "energy.power", campaign="energy"),
    Fault("the setup energy set to zero", edits.setup_energy_zero, "energy.setup", campaign="energy"),
    Fault("the median joules per token edited", edits.joules_per_token_edited, "energy.joules_per_token", campaign="energy"),
    Fault("the mean power edited", edits.mean_power_edited, "energy.mean_watts", campaign="energy"),
    Fault("an instrumented result's power interval claimed by a throughput result", edits.energy_interval_edited, "energy.interval", campaign="energy"),
    Fault("a window's counter readings removed", edits.window_readings_removed, "energy.present", campaign="energy"),
    Fault("a job's recorded energy below its windows' (Slurm)", edits.job_energy_below_its_windows, "slurm.energy", frozenset({"slurm.receipt_accounting"}), campaign="energy"),
]
# fmt: on


@pytest.mark.parametrize("kind", ["throughput", "optimizer", "capped", "local", "energy"])
def test_unplanted_campaigns_pass(tmp_path, kind):
    assert failed_checks(build(tmp_path, kind)) == set()


def _row(fault: Fault):
    marks = [pytest.mark.xfail(reason=f"not caught yet: {fault.pending}", strict=True)] if fault.pending else []
    return pytest.param(fault, id=f"{fault.plant.__name__}-{fault.campaign}", marks=marks)


@pytest.mark.parametrize("fault", [_row(f) for f in FAULTS])
def test_planted_fault_is_caught_by_its_check(tmp_path, fault):
    ok, failed = caught(fault, tmp_path)
    assert fault.check in failed, f"{fault.name}: not caught by {fault.check}; failed {sorted(failed)}"
    assert ok, f"{fault.name}: {fault.check} failed, and also {sorted(failed - {fault.check} - fault.also)}"


def test_roofline_is_not_applicable_for_an_unknown_gpu_and_passes_a_real_rate(tmp_path):
    p = build(tmp_path, "throughput")
    unknown = msgspec.structs.replace(H200, gpu_name="NVIDIA RTX 9090")
    p.rewrite_result("20m-c512", 1, replace_fields(hardware=unknown))
    p.rewrite_result("20m-c512", 2, replace_fields(hardware=H200))
    checks = {
        c.file: c
        for c in run_audit(p.built.root, runner=p.sacct, settle_seconds=0).report.checks
        if c.name == "throughput.roofline"
    }
    na = checks["curves/20m-c512/b1/attempt-1/result.json"]
    assert (
        na.status == "not_applicable" and "'NVIDIA RTX 9090' with 140.4 GiB: no datasheet BF16 peak known" in na.message
    )
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
    """Every check name the audit's source passes to Checks (the "slurm" and "energy" lines are only ever
    not applicable: a campaign without Slurm accounting, a result without energy)."""
    import re

    import throughput_audit

    src = Path(throughput_audit.__file__).parent
    found = set()
    for path in src.glob("*.py"):
        found |= set(re.findall(r'checks\.(?:expect|fail|not_applicable|requested)\(\s*"([a-z_.]+)"', path.read_text()))
    return found - {"slurm", "energy"}


def unplanted_line() -> str:
    unplanted = audit_check_names() - {f.check for f in FAULTS if not f.pending}
    return "Checks without a fault that they catch yet: " + ", ".join(f"`{c}`" for c in sorted(unplanted)) + "."


def test_reliability_doc_states_the_table_and_the_share():
    text = " ".join(DOC.read_text().split())
    assert share_line() in text, f"docs/reliability.md must say: {share_line()}"
    assert unplanted_line() in text, f"docs/reliability.md must say: {unplanted_line()}"
    text = DOC.read_text()
    assert table() in text, (
        "docs/reliability.md's fault table differs from FAULTS: regenerate it (python THIS_FILE --table)"
    )


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
    print(
        f"{hit} of {len(FAULTS)} planted faults caught ({hit / len(FAULTS):.0%}); the documented figure: {share_line()}"
    )
    for f in FAULTS:
        if f.pending:
            print(f"not caught yet: {f.name} ({f.pending})")
    sys.exit(0 if hit == sum(1 for f in FAULTS if not f.pending) else 1)
