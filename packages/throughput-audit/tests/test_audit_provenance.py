"""What a campaign's figures rest on: the worker that wrote them, the protocol against the
guide's, and the hardware of its points (issue 17, parts 2-4), on campaigns built on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign_builder.complete import build_throughput
from throughput_audit import cli
from throughput_audit.audit import run_audit

TEST_WORKER = {"module": "scripted_worker", "version": "test", "written_by": "worker"}


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def results(root: Path) -> list[Path]:
    return sorted(root.glob("curves/*/b*/attempt-*/result.json"))


def failed(outcome) -> list[str]:
    return sorted({c.name for c in outcome.report.checks if c.status == "fail"})


@pytest.fixture
def campaign(tmp_path):
    return build_throughput(tmp_path / "tp", contexts=(512,))


def as_test_worker(built) -> None:
    edit(built.root / "manifest.json", lambda m: m.update(worker="scripted_worker"))
    for path in results(built.root):
        edit(path, lambda r: r.update(worker=TEST_WORKER))


def test_a_test_workers_campaign_fails_unless_allowed_then_carries_the_banner(campaign):
    as_test_worker(campaign)
    refused = run_audit(campaign.root, runner=campaign.sacct(), settle_seconds=0)
    assert failed(refused) == ["worker.production"]
    assert refused.report.test_worker == "" and not refused.report.notes

    allowed = run_audit(campaign.root, runner=campaign.sacct(), settle_seconds=0, allow_test_worker=True)
    assert failed(allowed) == []
    assert allowed.report.test_worker == "scripted_worker"
    assert allowed.report.notes[0].startswith("TEST WORKER scripted_worker")
    assert allowed.accounting.startswith("# TEST WORKER scripted_worker")


def test_a_result_naming_another_worker_or_an_unknown_writer_fails(campaign):
    as_test_worker(campaign)
    first, second = results(campaign.root)[:2]
    edit(first, lambda r: r.update(worker={**TEST_WORKER, "module": "tiny_llm"}))
    # The upgrade named the manifest's worker, but could not tell who wrote the result: in a
    # test worker's campaign, nothing says it is not a stand-in.
    edit(second, lambda r: r.update(worker={**TEST_WORKER, "version": "", "written_by": "upgrade"}))
    outcome = run_audit(campaign.root, runner=campaign.sacct(), settle_seconds=0, allow_test_worker=True)
    bad = [c for c in outcome.report.checks if c.status == "fail"]
    assert [c.name for c in bad] == ["result.worker", "result.worker"]
    assert {c.file.split("/")[2] for c in bad} == {first.parts[-3], second.parts[-3]}
    assert "written by an unknown writer (`throughput-schema upgrade` named the manifest's worker)" in bad[1].message


def test_a_result_naming_no_worker_is_unreadable_and_names_the_upgrade(campaign):
    first = results(campaign.root)[0]
    edit(first, lambda r: r.pop("worker"))
    outcome = run_audit(campaign.root, runner=campaign.sacct(), settle_seconds=0)
    (bad,) = [c for c in outcome.report.checks if c.status == "fail" and c.name == "files.decode"]
    assert "missing required field `worker`" in bad.message
    assert f"throughput-schema upgrade {campaign.root}`" in bad.message


def test_results_naming_the_production_worker_pass(campaign):
    outcome = run_audit(campaign.root, runner=campaign.sacct(), settle_seconds=0)
    assert failed(outcome) == []
    assert outcome.report.test_worker == "" and outcome.report.notes == []


def test_the_cli_fails_a_test_worker_and_prints_the_banner_first_and_last_when_allowed(campaign, capsys):
    as_test_worker(campaign)
    assert cli.main(["--output", str(campaign.root), "--no-slurm"]) == 1
    out = capsys.readouterr().out
    assert "FAIL worker.production" in out and "TEST WORKER" not in out
    assert cli.main(["--output", str(campaign.root), "--no-slurm", "--allow-test-worker"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("TEST WORKER scripted_worker") and lines[-1] == lines[0]


def test_a_protocol_other_than_the_guides_and_mixed_hardware_are_noted(campaign, capsys):
    edit(campaign.root / "manifest.json", lambda m: m["protocol"].update(window_seconds=2.0, warmup=3))
    for path in results(campaign.root):
        edit(path, lambda r: r["protocol"].update(window_seconds=2.0, warmup=3))
    ok = [p for p in results(campaign.root) if json.loads(p.read_text())["throughput"]]
    for path, gpu in zip(ok, ("NVIDIA H200", "NVIDIA H100 80GB HBM3")):
        edit(path, lambda r, gpu=gpu: r["hardware"].update(gpu_name=gpu))
    cli.main(["--output", str(campaign.root), "--no-slurm"])
    out = capsys.readouterr().out
    assert "protocol differs from the guide: 3 warm-up updates (guide: 20), 2 s windows (guide: 10 s)" in out
    assert "points ran on different hardware or software: GPU models NVIDIA H200 / NVIDIA H100 80GB HBM3" in out
