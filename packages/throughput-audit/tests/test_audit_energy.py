"""The audit's energy checks: every figure derived again from the counter's raw readings,
the power against the limit, the counter's direction, setup energy, and each Slurm job's
recorded energy against its windows'; results without energy are not applicable, with
the reason. The planted faults are rows of test_planted_faults.py (campaign "energy")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pytest

from campaign_builder.auditing import audit, failures, point
from campaign_builder.complete import build_optimizer, build_throughput
from campaign_builder.energy import add_energy
from throughput_audit.campaign import load
from throughput_audit.energy import check_job_energy, summary_line
from throughput_audit.findings import Checks
from throughput_schema import WorkerResult, read, write_atomic
from throughput_schema.layout import RESULT
from throughput_slurm import sacct

ENERGY_CHECKS = (
    "energy.counter",
    "energy.window_joules",
    "energy.window_watts",
    "energy.window_joules_per_token",
    "energy.joules_per_token",
    "energy.mean_watts",
    "energy.interval",
    "energy.power",
    "energy.power_limit",
    "energy.setup",
)


def _by(out, name: str) -> list:
    return [c for c in out.report.checks if c.name == name]


def test_a_campaign_with_energy_passes_every_energy_check(tmp_path):
    built = add_energy(build_throughput(tmp_path / "tp"))
    out = audit(built)
    assert failures(out) == []
    ok = 6  # 20m at 512 and 1024, batches 1, 2 and 4 fit
    counts = Counter((c.name, c.status) for c in out.report.checks)
    for name in ENERGY_CHECKS:
        assert counts[(name, "pass")] == ok, name
    assert counts[("slurm.energy", "pass")] == ok
    # The OOM jobs used energy but no result of theirs measured windows: said so.
    assert counts[("slurm.energy", "not_applicable")] == 2
    res = read(point(built, "20m-c1024", 2) / RESULT, WorkerResult)
    (job,) = [c for c in _by(out, "slurm.energy") if c.file == "curves/20m-c1024/b2/attempt-1/receipt.json"]
    windows = sum((w.energy.end_mj - w.energy.start_mj) / 1000 for w in res.windows if w.energy)
    assert job.values["window_joules"] == pytest.approx(windows) and job.values["job_joules"] > windows
    (limit,) = [c for c in _by(out, "energy.power_limit") if c.file == "curves/20m-c1024/b2/attempt-1/result.json"]
    assert "against the power limit 700 W + 5% = 735 W" in limit.message
    assert summary_line(out.report.checks) == (
        "energy: 6 results checked from the counter's raw readings; "
        "Slurm job energy: 6 jobs at least their windows', 0 below, 2 not applicable"
    )


def test_an_optimizer_campaign_checks_both_workers_and_the_span(tmp_path):
    parent = build_throughput(tmp_path / "tp")
    built = add_energy(build_optimizer(tmp_path / "opt", parent))
    out = audit(built)
    assert failures(out) == []
    files = {c.file for c in _by(out, "energy.joules_per_token") if c.status == "pass"}
    assert {Path(f).name for f in files} == {"result.json", "baseline.json"} and len(files) == 12
    spans = [c for c in _by(out, "energy.interval") if c.file.endswith("/result.json")]
    assert spans and all(c.values["interval"] == "span" for c in spans)
    # A job's windows are its two workers'.
    assert all("(result.json, baseline.json)" in c.message for c in _by(out, "slurm.energy"))


def test_results_without_energy_are_not_applicable_with_the_reason(tmp_path):
    built = build_throughput(tmp_path / "tp")
    folder = point(built, "20m-c512", 2)
    reason = "no energy counter: NVML not found (libnvidia-ml.so.1)"
    res = read(folder / RESULT, WorkerResult)
    write_atomic(folder / RESULT, msgspec.structs.replace(res, energy_unavailable=reason))
    out = audit(built)
    assert failures(out) == []
    na = {c.file: c for c in _by(out, "energy")}
    assert len(na) == 6 and all(c.status == "not_applicable" for c in na.values())
    assert na["curves/20m-c512/b2/attempt-1/result.json"].message.endswith(f"not applicable: {reason}")
    assert "written before energy was measured" in na["curves/20m-c512/b1/attempt-1/result.json"].message
    assert not [c for c in out.report.checks if c.name.startswith("energy.")]
    # The test Slurm's answer: no energy, said for every job, never a silent pass.
    jobs = _by(out, "slurm.energy")
    assert len(jobs) == 8 and all(c.status == "not_applicable" for c in jobs)
    assert all("not applicable: the cluster records no energy" in c.message for c in jobs)
    assert summary_line(out.report.checks) == (
        f"energy: 6 without energy: not applicable ({reason}; the result records none (written before energy was "
        "measured)); Slurm job energy: not applicable: the cluster records no energy (8 jobs)"
    )


def test_a_result_with_energy_on_a_cluster_without_it(tmp_path):
    out = audit(add_energy(build_throughput(tmp_path / "tp"), job_factor=None))
    assert failures(out) == []
    assert {c.status for c in _by(out, "slurm.energy")} == {"not_applicable"}
    assert {c.status for c in _by(out, "energy.joules_per_token")} == {"pass"}


# sacct --parsable2 in the audit's field order (sacct.FIELDS), ConsumedEnergyRaw before the
# Comment, as a cluster with an AcctGatherEnergyType plugin prints it; {energy} is filled in.
RECORDED = (
    "1004|{token}|COMPLETED|0:0|gpu|throughput|00:14:00|billing=8,cpu=8,gres/gpu=1,mem=64G,node=1|64G|"
    "2026-10-08T10:03:00|2026-10-08T10:04:30|00:01:30|node1|{energy}|{token}\n"
)


@pytest.mark.parametrize(
    "energy,status,says",
    [
        ("45230", "pass", "job 1004 used 45,230 J (sacct ConsumedEnergyRaw); its windows (result.json) measured"),
        ("20000", "fail", "the job recorded less than its windows"),
        ("0", "not_applicable", "not applicable: the cluster records no energy (sacct ConsumedEnergyRaw '0'"),
        ("", "not_applicable", "not applicable: the cluster records no energy (sacct ConsumedEnergyRaw ''"),
        ("18446744073709551614", "not_applicable", "not applicable: the cluster records no energy"),
        ("n/a", "fail", "is not a number of joules"),
    ],
)
def test_job_energy_against_recorded_sacct_text(tmp_path, energy, status, says):
    built = add_energy(build_throughput(tmp_path / "tp"), job_factor=None)
    loaded = load(built.root, Checks(), optimizer=False)
    (record,) = [r for r in loaded.attempts if r.attempt.receipt and r.attempt.receipt.job_id == "1004"]
    assert record.attempt.result is not None
    windows = sum(w.energy.joules for w in record.attempt.result.windows if w.energy)
    assert 20_000 < windows < 45_230  # the recorded figures above lie either side of it
    (row,) = sacct.parse_rows(RECORDED.format(token=record.attempt.receipt.token, energy=energy))
    assert row.consumed_energy_raw == energy and row.comment == record.attempt.receipt.token
    checks = Checks()
    check_job_energy(record, row, checks)
    (check,) = checks.items
    assert (check.name, check.status) == ("slurm.energy", status)
    assert says in check.message


def test_the_receipt_copy_compares_recorded_energy(tmp_path):
    built = add_energy(build_throughput(tmp_path / "tp"))
    job = next(iter(built.rows))
    built.rows[job] = msgspec.structs.replace(built.rows[job], consumed_energy_raw="1")
    assert {c.name for c in failures(audit(built))} == {"slurm.receipt_accounting", "slurm.energy"}
    # A cluster that records no energy: sacct's "" reads as not measured, in the receipt and now.
    none = add_energy(build_throughput(tmp_path / "none"), job_factor=None)
    out = audit(none)
    assert failures(out) == [] and _by(out, "slurm.energy")
