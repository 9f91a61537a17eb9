"""Pure audit tests: consistent campaigns built on disk, then one planted fault at a time."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import msgspec
import pytest

from throughput_audit import cli, slurm
from throughput_audit.audit import run_audit, write_outputs
from campaign_builder.complete import FakeSacct, build_optimizer, build_throughput


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def failures(outcome, name: str | None = None):
    return [c for c in outcome.report.checks if c.status == "fail" and (name is None or c.name == name)]


def audit(built, sacct: FakeSacct | None = None):
    return run_audit(built.root, runner=sacct or built.sacct(), settle_seconds=0)


@pytest.fixture
def campaign(tmp_path):
    return build_throughput(tmp_path / "tp", unstable={"20m-c512": [2]})


def point(built, curve: str, batch: int) -> Path:
    return built.points[curve][batch]


# ------------------------------------------------------------------------ untouched


def test_untouched_throughput_campaign_passes(campaign):
    sacct = campaign.sacct()
    out = audit(campaign, sacct)
    assert failures(out) == []
    assert out.report.slurm == "checked"
    assert len(sacct.calls) == 1  # 8 jobs, one batched query
    c512 = next(c for c in out.report.curves if c.curve == "20m-c512")
    assert (c512.state, c512.largest_fitting_batch, c512.first_oom_batch) == ("bounded", 4, 8)
    assert c512.unstable_batches == [2]
    unstable = msgspec.json.decode((point(campaign, "20m-c512", 2) / "result.json").read_bytes())
    assert len(unstable["windows"]) == 10 and unstable["throughput"]["unstable"] is True


def test_untouched_optimizer_campaign_passes(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    out = audit(opt)
    assert failures(out) == []
    assert [c.fitting_batches for c in out.report.curves] == [[1, 2, 4], [1, 2, 4]]
    pct = [c for c in out.report.checks if c.name == "optimizer.primary_percent"]
    assert len(pct) == 6 and all(0 < c.values["percent"] < 100 for c in pct)


def test_cli_writes_files_and_exits_zero(campaign, monkeypatch, capsys):
    monkeypatch.setattr(slurm, "_run", campaign.sacct())
    assert cli.main(["--output", str(campaign.root)]) == 0
    report = json.loads((campaign.root / "audit.json").read_text())
    assert report["summary"]["failed"] == 0 and report["checks"]
    assert all({"name", "status"} <= set(c) for c in report["checks"])
    accounting = (campaign.root / "accounting.txt").read_text()
    assert "JobID|JobName|State" in accounting and "gres/gpu=1" in accounting
    assert "0 failed" in capsys.readouterr().out


# ------------------------------------------------------------------------ planted faults


def test_changed_window_seconds_is_caught(campaign):
    result = point(campaign, "20m-c1024", 2) / "result.json"
    edit(result, lambda d: d["windows"][3].update(seconds=d["windows"][3]["seconds"] * 1.1))
    out = audit(campaign)
    bad = failures(out, "throughput.window_rates")
    assert len(bad) == 1
    assert "curves/20m-c1024/b2/attempt-1/result.json" in bad[0].message
    assert "window 3: 40 updates x 2 x 1024 tokens" in bad[0].message
    assert bad[0].file == "curves/20m-c1024/b2/attempt-1/result.json"


def test_point_deleted_from_middle_of_curve_is_caught(campaign):
    shutil.rmtree(point(campaign, "20m-c512", 2).parent)
    out = audit(campaign)
    bad = failures(out, "curve.contiguous")
    assert len(bad) == 1
    assert bad[0].message == "curves/20m-c512: batches [1, 4, 8]; missing [2] (gap in the doublings from 1)"


def test_boundary_set_by_a_timeout_is_caught(campaign):
    folder = point(campaign, "20m-c512", 8)
    edit(folder / "result.json", lambda d: d.update(outcome={"kind": "timeout", "phase": "measurement"}))
    # The receipt's accounting says so too: a consistent timeout, which never sets a boundary.
    edit(folder / "receipt.json", lambda d: d["accounting"].update(state="TIMEOUT", exit_code="0:15"))
    sacct = campaign.sacct()
    job = json.loads((folder / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(sacct.rows[job], state="TIMEOUT", exit_code="0:15")
    out = audit(campaign, sacct)
    curve = next(c for c in out.report.curves if c.curve == "20m-c512")
    assert (curve.state, curve.first_oom_batch, curve.blocked_batch) == ("blocked", None, 8)
    bad = failures(out)
    assert [c.name for c in bad] == ["summary.curve"]
    assert "results.json: 20m-c512 reported bounded, largest fitting 4, first OOM 8" in bad[0].message
    assert "the raw files give blocked, largest fitting 4, first OOM None" in bad[0].message
    assert "only a cuda_oom sets the boundary, batch 8 ended timeout (curves/20m-c512/b8/attempt-1)" in bad[0].message


def test_timeout_result_with_oom_accounting_is_caught(campaign):
    folder = point(campaign, "20m-c1024", 8)
    edit(folder / "result.json", lambda d: d.update(outcome={"kind": "timeout"}))
    out = audit(campaign)
    names = {c.name for c in failures(out)}
    assert {"receipt.state", "slurm.state", "summary.curve"} <= names
    state = failures(out, "slurm.state")[0]
    assert "ended FAILED exit 3:0; result.json outcome timeout implies TIMEOUT or FAILED with exit 6" in state.message


def test_recipe_differing_from_frozen_is_caught(campaign):
    result = point(campaign, "20m-c512", 4) / "result.json"
    edit(result, lambda d: d["recipe"]["model"].update(ffn_dim=896))
    out = audit(campaign)
    bad = failures(out, "recipe.frozen")
    assert len(bad) == 1
    assert bad[0].file == "curves/20m-c512/b4/attempt-1/result.json"
    assert "model.ffn_dim frozen 832, result 896" in bad[0].message
    assert "frozen/recipes/20m.json" in bad[0].message
    params = failures(out, "recipe.parameters")
    assert params and "parameters recomputed" in params[0].message


def test_recipe_with_other_learning_rate_is_caught(campaign):
    edit(point(campaign, "20m-c1024", 1) / "result.json", lambda d: d["recipe"]["optimizer"].update(lr=0.002))
    bad = failures(audit(campaign), "recipe.frozen")
    assert len(bad) == 1 and "optimizer.lr frozen 0.001, result 0.002" in bad[0].message


def test_edited_frozen_file_is_caught(campaign):
    with open(campaign.root / "frozen" / "uv.lock", "a") as f:
        f.write("# edited\n")
    bad = failures(audit(campaign), "frozen.sha256")
    assert len(bad) == 1
    assert bad[0].file == "frozen/uv.lock"
    assert "(21 bytes), manifest.json says" in bad[0].message and "(12 bytes)" in bad[0].message


def test_unlisted_frozen_file_is_caught(campaign):
    (campaign.root / "frozen" / "extra.py").write_text("x = 1\n")
    bad = failures(audit(campaign), "frozen.unlisted")
    assert len(bad) == 1 and "extra.py" in bad[0].message


def test_peak_concurrency_over_the_limit_is_caught(tmp_path):
    built = build_throughput(tmp_path / "tp", contexts=(512, 1024, 2048), max_concurrent=2)
    out = audit(built)
    bad = failures(out)
    assert [c.name for c in bad] == ["slurm.peak_concurrency"]
    assert bad[0].values["peak"] == 3 and bad[0].values["limit"] == 2
    assert "peak 3 jobs running at once at 2026-10-08T12:00:02 (1000, 1004, 1008)" in bad[0].message
    assert "the campaign's limit is 2" in bad[0].message


def test_back_to_back_jobs_do_not_overlap(tmp_path):
    built = build_throughput(tmp_path / "tp", contexts=(512,), max_concurrent=1, stagger_seconds=90)
    assert failures(audit(built)) == []


def test_receipt_pointing_at_a_job_with_other_resources_is_caught(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c512", 2) / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(
        sacct.rows[job], alloc_tres="billing=2,cpu=2,mem=2G,node=1", timelimit="00:05:00", job_name="other", comment=""
    )
    out = audit(campaign, sacct)
    bad = failures(out, "slurm.allocation")
    assert len(bad) == 1
    msg = bad[0].message
    assert msg.startswith(f"curves/20m-c512/b2/attempt-1/receipt.json: job {job} ")
    for part in ("gres/gpu None, profile requires 1", "cpu '2', profile requires 8", "mem '2G', profile requires '64G'",
                 "timelimit '00:05:00', profile requires '00:14:00'"):
        assert part in msg
    assert failures(out, "slurm.identity")


def test_job_missing_from_accounting_is_caught(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c1024", 4) / "receipt.json").read_text())["job_id"]
    del sacct.rows[job]
    bad = failures(audit(campaign, sacct), "slurm.accounted")
    assert len(bad) == 1
    assert bad[0].message == f"curves/20m-c1024/b4/attempt-1/receipt.json: job {job} is missing from Slurm accounting"


def test_wrong_account_and_partition_are_caught(campaign):
    sacct = campaign.sacct()
    sacct.rows = {j: msgspec.structs.replace(r, account="other", partition="debug") for j, r in sacct.rows.items()}
    bad = failures(audit(campaign, sacct), "slurm.allocation")
    assert len(bad) == 8
    assert "account 'other', profile requires 'throughput'; partition 'debug', profile requires 'gpu'" in bad[0].message


def test_counter_mismatch_is_caught(campaign):
    result = point(campaign, "20m-c512", 1) / "result.json"
    edit(result, lambda d: d["windows"][2].update(counter_after=d["windows"][2]["counter_after"] + 1))
    bad = failures(audit(campaign), "windows.update_counter")
    assert len(bad) == 1 and "first mismatch at window 2" in bad[0].message


def test_missing_extra_windows_are_caught(campaign):
    # An unstable point that stopped after five windows: the rule asked for ten.
    result = point(campaign, "20m-c512", 2) / "result.json"
    edit(result, lambda d: d.update(windows=d["windows"][:5]))
    bad = failures(audit(campaign), "windows.count")
    assert len(bad) == 1 and "5 windows, expected 10" in bad[0].message


def test_wrong_unstable_flag_is_caught(campaign):
    edit(point(campaign, "20m-c512", 2) / "result.json", lambda d: d["throughput"].update(unstable=False))
    bad = failures(audit(campaign), "throughput.unstable")
    assert len(bad) == 1 and "means unstable=True, result says unstable=False" in bad[0].message


def test_wrong_tokens_per_update_is_caught(campaign):
    edit(point(campaign, "20m-c512", 4) / "result.json", lambda d: d["recipe"]["training"].update(batch_tokens=4096))
    bad = failures(audit(campaign), "recipe.tokens_per_update")
    assert len(bad) == 1 and "batch_tokens 4096" in bad[0].message and "B x L = 2048" in bad[0].message


def test_point_beyond_the_boundary_is_caught(tmp_path):
    built = build_throughput(tmp_path / "tp", contexts=(512,), first_oom=8)
    src = point(built, "20m-c512", 4).parent
    shutil.copytree(src, src.parent / "b16")
    out = audit(built)
    assert "curves/20m-c512: batches [16] exist beyond batch 8" in failures(out, "curve.after_end")[0].message


def test_local_campaign_reports_slurm_not_applicable(tmp_path):
    built = build_throughput(tmp_path / "tp", scheduler="local")
    sacct = built.sacct()
    out = audit(built, sacct)
    assert failures(out) == [] and out.report.slurm == "not_applicable" and sacct.calls == []
    na = [c for c in out.report.checks if c.status == "not_applicable" and c.name == "slurm"]
    assert na and "local scheduler" in na[0].message


# ------------------------------------------------------------------------ optimizer faults


def test_optimizer_burst_edit_is_caught(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    path = point(opt, "20m-c512", 2) / "bursts.jsonl"
    lines = path.read_text().splitlines()
    sample = json.loads(lines[3])
    sample["optimizer_ms"] *= 1.5
    lines[3] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")
    out = audit(opt)
    names = {c.name for c in failures(out)}
    assert {"optimizer.bursts", "optimizer.window_ms"} <= names
    assert "first difference at window 0" in failures(out, "optimizer.window_ms")[0].message


def test_optimizer_grid_missing_and_extra_points_are_caught(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    shutil.rmtree(point(opt, "20m-c512", 2).parent)
    src = point(opt, "20m-c1024", 4).parent
    shutil.copytree(src, src.parent / "b8")
    out = audit(opt)
    msgs = [c.message for c in failures(out, "optimizer.grid")]
    assert "curves/20m-c512: measured [1, 4] of inherited [1, 2, 4]; missing [2]" in msgs
    assert any("extra [8] not in the inherited grid" in m for m in msgs)


def test_optimizer_inherited_grid_against_parent_is_caught(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    edit(opt.root / "manifest.json", lambda d: d["inherited_batches"].update({"20m-c512": [1, 2]}))
    out = audit(opt)
    bad = failures(out, "optimizer.inherited")
    assert bad and "inherited_batches[20m-c512] = [1, 2], the parent's fitting batches are [1, 2, 4]" in bad[0].message


def test_optimizer_primary_percentage_uses_the_paired_baseline(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    folder = point(opt, "20m-c1024", 4)
    out = audit(opt)
    pct = next(c for c in out.report.checks if c.name == "optimizer.primary_percent" and c.file.startswith(str(folder.relative_to(opt.root))))
    base = json.loads((folder / "baseline.json").read_text())
    res = json.loads((folder / "result.json").read_text())
    expected = 100 * res["optimizer_timing"]["optimizer_ms"] / (1000 * 4 * 1024 / base["throughput"]["tokens_per_second"])
    assert pct.values["percent"] == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------ usage, speed


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    assert cli.main(["--output", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"throughput-audit: {tmp_path / 'nothing'}: no such campaign folder"
    assert cli.main(["--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"throughput-audit: {tmp_path}: not a campaign (no manifest.json)"
    (tmp_path / "manifest.json").write_text("{")
    assert cli.main(["--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "manifest.json" in err


def test_cli_exits_one_on_failure(campaign, monkeypatch, capsys):
    shutil.rmtree(point(campaign, "20m-c512", 2).parent)
    monkeypatch.setattr(slurm, "_run", campaign.sacct())
    assert cli.main(["--output", str(campaign.root)]) == 1
    out = capsys.readouterr().out
    assert "FAIL curve.contiguous: curves/20m-c512: batches [1, 4, 8]; missing [2]" in out
    assert json.loads((campaign.root / "audit.json").read_text())["summary"]["failed"] >= 1


def test_audit_of_200_points_is_fast_and_batches_sacct(tmp_path):
    contexts = tuple(128 * 2**i for i in range(10))  # 2 models x 10 contexts x 10 batches = 200 points
    built = build_throughput(tmp_path / "big", models=("20m", "90m"), contexts=contexts, first_oom=512, max_concurrent=20)
    n = sum(len(p) for p in built.points.values())
    assert n == 200
    sacct = built.sacct()
    t0 = time.perf_counter()
    out = audit(built, sacct)
    write_outputs(built.root, out)
    elapsed = time.perf_counter() - t0
    assert failures(out) == []
    assert len(sacct.calls) == 2  # 200 jobs, 100 per query
    assert elapsed < 10, elapsed


def test_audit_never_imports_torch(campaign):
    # A fresh interpreter: other tests in this process may have imported torch already.
    import subprocess
    import sys

    code = (
        "import sys; from throughput_audit.cli import main; "
        f"main(['--output', {str(campaign.root)!r}]); "
        "sys.exit(3 if 'torch' in sys.modules else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 3, "the audit imported torch"
    assert "Traceback" not in done.stderr, done.stderr
    assert (campaign.root / "audit.json").exists()


def test_sacct_parsing_keeps_pipes_in_comments():
    fields = [name for name, _ in slurm.FIELDS]
    line = "|".join(["42", "tok", "COMPLETED", "0:0", "gpu", "acct", "00:14:00", "cpu=8", "64G", "2026-01-01T00:00:00",
                     "2026-01-01T00:01:00", "00:01:00", "n1", "a|b"])
    (row,) = slurm.parse(line + "\n")
    assert row.comment == "a|b" and row.job_id == "42" and len(fields) == 14
    assert slurm.timelimit_minutes("1-00:00:00") == 1440 and slurm.timelimit_minutes("14:00") == 14
    assert slurm.mem_mib("65536M") == slurm.mem_mib("64G")


def test_local_campaign_concurrency_comes_from_recorded_accounting(tmp_path):
    built = build_throughput(tmp_path / "tp", scheduler="local", max_concurrent=1)
    bad = failures(audit(built))
    assert [c.name for c in bad] == ["local.peak_concurrency"]
    assert bad[0].values["peak"] == 2 and bad[0].values["limit"] == 1


def test_peak_concurrency_of_short_sequential_jobs():
    from throughput_schema import AccountingRow

    def row(job, start, end):
        return AccountingRow(job_id=job, start=f"2026-01-01T00:00:{start:02d}", end=f"2026-01-01T00:00:{end:02d}")

    # Jobs that start and end within one second, one after another (sacct's resolution).
    assert slurm.peak_concurrency([row("1", 33, 33), row("2", 34, 34), row("3", 35, 35)]).jobs == 1
    # One job ends the second the next starts: not concurrent.
    assert slurm.peak_concurrency([row("1", 10, 20), row("2", 20, 30)]).jobs == 1
    # A short job inside a long one, and one starting when a zero-length one ran.
    assert slurm.peak_concurrency([row("1", 10, 30), row("2", 15, 15), row("3", 15, 20)]).jobs == 3
    running = AccountingRow(job_id="4", start="2026-01-01T00:00:05", end="Unknown")
    assert slurm.peak_concurrency([row("1", 10, 30), running]).jobs == 2


def test_optimizer_bursts_from_result_when_bursts_file_is_absent(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    folder = point(opt, "20m-c512", 4)
    (folder / "bursts.jsonl").unlink()
    assert failures(audit(opt)) == []
    edit(folder / "result.json", lambda d: d["optimizer_timing"]["bursts"][0].update(optimizer_ms=99.0))
    bad = failures(audit(opt), "optimizer.window_ms")
    assert len(bad) == 1 and bad[0].file == "curves/20m-c512/b4/attempt-1/result.json"


def _lose_job(campaign, folder, finished: str, end: str):
    """The worker finished its result at `finished`; the job ended NODE_FAIL at `end`,
    in the receipt and in sacct alike."""
    edit(folder / "result.json", lambda d: d.update(finished_at=finished))
    edit(folder / "receipt.json", lambda d: d["accounting"].update(state="NODE_FAIL", exit_code="0:0", end=end))
    sacct = campaign.sacct()
    job = json.loads((folder / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(sacct.rows[job], state="NODE_FAIL", exit_code="0:0", end=end)
    return sacct


def test_job_lost_after_its_result_was_finished_is_accepted(campaign):
    """A node (or the local machine) lost while the job was finishing: the worker's ok result
    is whole and was finished before the job's end, so it stands, as the controller keeps it."""
    folder = point(campaign, "20m-c512", 4)
    out = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:32:42+00:00", "2026-11-29T21:33:20+00:00"))
    assert not failures(out)


@pytest.mark.parametrize("tz", ["Asia/Tokyo", "America/Los_Angeles"])
def test_lost_job_times_compare_as_instants_in_any_auditors_timezone(campaign, tz, monkeypatch):
    """The result's UTC time against an end written with another offset (the local
    scheduler writes its machine's), audited in a third timezone: 10 s apart either way."""
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        folder = point(campaign, "20m-c512", 4)
        fine = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:20+00:00", "2026-11-30T06:33:30+09:00"))
        assert not failures(fine)
        late = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:40+00:00", "2026-11-30T06:33:30+09:00"))
        assert "NODE_FAIL/BOOT_FAIL ending after the result was finished" in failures(late, "slurm.state")[0].message
    finally:
        monkeypatch.undo()
        time.tzset()


def test_ok_result_finished_after_a_lost_job_is_caught(campaign):
    folder = point(campaign, "20m-c512", 4)
    out = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:20+00:00", "2026-11-29T21:32:42+00:00"))
    assert {"receipt.state", "slurm.state"} <= {c.name for c in failures(out)}
    assert "NODE_FAIL/BOOT_FAIL ending after the result was finished" in failures(out, "slurm.state")[0].message
