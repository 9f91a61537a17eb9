"""Pure audit tests: consistent campaigns built on disk, then one planted fault at a time."""

from __future__ import annotations

import json
import shutil

import msgspec
import pytest

from campaign_builder.auditing import audit, edit, failures, point
from campaign_builder.complete import build_optimizer, build_throughput
from campaign_builder.files import receipt_ended
from throughput_audit import cli, slurm


def test_untouched_throughput_campaign_passes(campaign):
    sacct = campaign.sacct()
    out = audit(campaign, sacct)
    assert failures(out) == []
    assert out.report.scheduler_accounting == "checked"
    assert len(sacct.by_id()) == 1 and len(sacct.by_name()) == 1  # 8 jobs and their 8 tokens, one batched query each
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
    edit(folder / "receipt.json", lambda d: receipt_ended(d, "TIMEOUT", "0:15"))
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
    assert "ended failed exit 3; result.json outcome timeout implies timeout or failed with exit 6" in state.message


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
    pct = next(
        c
        for c in out.report.checks
        if c.name == "optimizer.primary_percent" and c.file.startswith(str(folder.relative_to(opt.root)))
    )
    base = json.loads((folder / "baseline.json").read_text())
    res = json.loads((folder / "result.json").read_text())
    expected = (
        100 * res["optimizer_timing"]["optimizer_ms"] / (1000 * 4 * 1024 / base["throughput"]["tokens_per_second"])
    )
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


def test_optimizer_bursts_from_result_when_bursts_file_is_absent(tmp_path, campaign):
    opt = build_optimizer(tmp_path / "opt", campaign)
    folder = point(opt, "20m-c512", 4)
    (folder / "bursts.jsonl").unlink()
    assert failures(audit(opt)) == []
    edit(folder / "result.json", lambda d: d["optimizer_timing"]["bursts"][0].update(optimizer_ms=99.0))
    bad = failures(audit(opt), "optimizer.window_ms")
    assert len(bad) == 1 and bad[0].file == "curves/20m-c512/b4/attempt-1/result.json"


def test_a_recomputed_figure_is_one_check_with_both_sides_named():
    from throughput_audit.findings import Checks

    checks = Checks()
    assert checks.figure("x.median", "r.json", 1.0, 1.0 + 1e-12, what="median", how=" tok/s")
    # A series one window short differs, though every pair that zip would give agrees.
    assert not checks.figure("x.windows", "r.json", [1.0, 2.0], [1.0, 2.0, 3.0], what="windows")
    assert not checks.figure("x.flag", "r.json", False, True, message="flag", given={"cv": 0.1})
    median, windows, flag = checks.items
    assert (median.status, median.message) == (
        "pass",
        "r.json: median recomputed 1.0 tok/s, result says 1.000000000001",
    )
    assert windows.message == "r.json: windows recomputed [1.0, 2.0], result says [1.0, 2.0, 3.0]"
    assert list(flag.values) == ["cv", "recomputed", "reported"] and flag.message == "r.json: flag"
