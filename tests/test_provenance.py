"""What a campaign's figures rest on, said wherever they appear (issue 17, parts 2-4).

A scripted-worker campaign on the local scheduler and its optimizer follow-up: the
results name their worker and no real GPU; the audit fails them and the report refuses
them unless --allow-test-worker is given, which puts a banner on every output; the
protocol's difference from the guide (1 s windows) is one line in status, collect's
README, the audit and page 1 of the report; collect carries each point's hardware, and
points on different hardware are flagged by collect, the audit and the report.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from pypdf import PdfReader

from campaign_helpers import ROOT, sweep, write_plan
from throughput_schema import WorkerResult, read, write_atomic

pytestmark = pytest.mark.slow  # whole campaigns, collected, audited and reported

PROTOCOL_LINE = "protocol differs from the guide: 1 s windows (guide: 10 s)"
BANNER = "TEST WORKER scripted_worker"
FAST = ("--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "1", "--no-progress")


def tool(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """A finished scripted throughput campaign (20m at 512, OOM at 4) and its follow-up, collected."""
    root = tmp_path_factory.mktemp("provenance")
    plan = write_plan(root, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05)
    tp, opt = root / "tp", root / "opt"
    run = sweep("run", "--output", tp, "--models", "20m", "--contexts", "512", *FAST, plan=plan)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    run = sweep("run", "--optimizer-timing-from", tp, "--output", opt, *FAST, plan=plan)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for campaign in (tp, opt):
        assert sweep("collect", "--output", campaign, plan=plan).returncode == 0
    return tp, opt


def copy(pair, tmp_path) -> tuple[Path, Path]:
    """Both campaigns copied, the follow-up still naming its parent by the parent's new path."""
    tp, opt = tmp_path / "tp", tmp_path / "opt"
    shutil.copytree(pair[0], tp, symlinks=True)
    shutil.copytree(pair[1], opt, symlinks=True)
    manifest = json.loads((opt / "manifest.json").read_text())
    manifest["parent"]["path"] = str(tp)
    write_atomic(opt / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return tp, opt


def results(campaign: Path) -> list[Path]:
    return sorted(campaign.glob("curves/*/b*/attempt-*/result.json")) + sorted(
        campaign.glob("curves/*/b*/attempt-*/baseline.json")
    )


def pdf_pages(report: Path) -> list[str]:
    return [page.extract_text() for page in PdfReader(report / "report.pdf").pages]


# ---------------------------------------------------------------------------- worker


def test_a_test_worker_names_itself_and_no_real_gpu(pair):
    for campaign in pair:
        for path in results(campaign):
            result = read(path, WorkerResult)
            assert result.worker is not None and result.worker.module == "scripted_worker", path
            fields = msgspec.to_builtins(result.hardware)
            assert not any("NVIDIA" in str(v) or "H200" in str(v) for v in fields.values()), (path, fields)
            if result.throughput is not None:
                assert "test worker" in result.hardware.gpu_name


def test_status_and_collect_say_a_test_worker_ran_the_campaign(pair):
    tp, _ = pair
    warning = "TEST WORKER scripted_worker: not measured by tiny_llm"
    assert warning in sweep("status", "--output", tp).stdout
    assert (tp / "README.md").read_text().startswith(f"**{warning}")


def test_the_audit_fails_a_test_worker_campaign_unless_allowed(pair, tmp_path):
    tp, _ = copy(pair, tmp_path)
    plain = tool("throughput_audit.py", "--output", tp)
    assert plain.returncode == 1, plain.stdout
    assert "FAIL worker.production" in plain.stdout and "--allow-test-worker" in plain.stdout
    assert json.loads((tp / "audit.json").read_text())["summary"]["failed"] >= 1

    allowed = tool("throughput_audit.py", "--output", tp, "--allow-test-worker")
    assert allowed.returncode == 0, allowed.stdout
    lines = allowed.stdout.strip().splitlines()
    assert lines[0].startswith(BANNER) and lines[-1].startswith(BANNER), allowed.stdout
    audit = json.loads((tp / "audit.json").read_text())
    assert audit["test_worker"] == "scripted_worker" and audit["notes"][0].startswith(BANNER)
    assert (tp / "accounting.txt").read_text().startswith(f"# {BANNER}")


def test_a_result_from_another_worker_fails_the_audit(pair, tmp_path):
    tp, _ = copy(pair, tmp_path)
    path = results(tp)[0]
    raw = json.loads(path.read_text())
    raw["worker"]["module"] = "tiny_llm"
    write_atomic(path, json.dumps(raw))
    audit = tool("throughput_audit.py", "--output", tp, "--allow-test-worker")
    assert audit.returncode == 1 and "FAIL result.worker" in audit.stdout, audit.stdout


def test_the_report_refuses_a_test_worker_unless_allowed_then_bannered(pair, tmp_path):
    tp, opt = copy(pair, tmp_path)
    refused = tool("throughput_report.py", "--throughput", tp, "--optimizer", opt, "--output", tmp_path / "r1")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "test worker 'scripted_worker'" in refused.stderr and "--allow-test-worker" in refused.stderr
    assert not (tmp_path / "r1").exists()

    out = tmp_path / "r2"
    made = tool("throughput_report.py", "--throughput", tp, "--optimizer", opt, "--output", out, "--allow-test-worker")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(BANNER)
    assert all(BANNER in text for text in pdf_pages(out))
    assert json.loads((out / "points.json").read_text())["inputs"]["test_worker"].startswith(BANNER)
    for svg in out.glob("*.svg"):
        assert BANNER in svg.read_text(), svg


# -------------------------------------------------------------------------- protocol


def test_a_protocol_other_than_the_guides_is_said_everywhere(pair, tmp_path):
    tp, opt = copy(pair, tmp_path)
    assert PROTOCOL_LINE in sweep("status", "--output", tp).stdout
    assert PROTOCOL_LINE in (tp / "README.md").read_text()
    assert PROTOCOL_LINE in tool("throughput_audit.py", "--output", tp, "--allow-test-worker").stdout
    out = tmp_path / "report"
    assert (
        tool(
            "throughput_report.py", "--throughput", tp, "--optimizer", opt, "--output", out, "--allow-test-worker"
        ).returncode
        == 0
    )
    assert PROTOCOL_LINE in " ".join(pdf_pages(out)[0].split()).lower()


# -------------------------------------------------------------------------- hardware


def test_collect_names_each_points_hardware(pair):
    tp, _ = pair
    rows = list(csv.DictReader((tp / "results.csv").open()))
    ok = [r for r in rows if r["outcome"] == "ok"]
    assert ok and all(
        r["gpu_name"] == "scripted test worker (no GPU)" and r["python"] and r["gpu_memory_bytes"] for r in ok
    )
    assert {"driver", "cuda", "torch"} <= set(rows[0])
    points = json.loads((tp / "results.json").read_text())["points"]
    assert all(p["gpu_name"] for p in points if p["outcome"] == "ok")
    readme = (tp / "README.md").read_text()
    assert "## Hardware" in readme and "| scripted test worker (no GPU) | 140.4 GiB |" in readme
    assert "| all 2 measured points |" in readme
    assert "MIXED HARDWARE" not in readme


def test_points_on_different_hardware_are_flagged(pair, tmp_path):
    tp, opt = copy(pair, tmp_path)
    for campaign in (tp, opt):
        path = next(p for p in results(campaign) if read(p, WorkerResult).throughput is not None)
        raw = json.loads(path.read_text())
        raw["hardware"]["python"] = "3.0.1"
        write_atomic(path, json.dumps(raw))
    plan = write_plan(tmp_path, {})
    assert sweep("collect", "--output", tp, plan=plan).returncode == 0
    flag = "points ran on different hardware or software: compute Pythons"
    assert flag in (tp / "README.md").read_text()
    assert json.loads((tp / "results.json").read_text())["hardware_mix"].startswith(flag)
    assert flag in tool("throughput_audit.py", "--output", tp, "--allow-test-worker").stdout
    out = tmp_path / "report"
    assert (
        tool(
            "throughput_report.py", "--throughput", tp, "--optimizer", opt, "--output", out, "--allow-test-worker"
        ).returncode
        == 0
    )
    assert flag.lower() in " ".join(pdf_pages(out)[0].split()).lower()


def test_a_precision_other_than_the_guides_is_said_everywhere(tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b2": "cuda_oom"}, ok_seconds=0.05)
    tp = tmp_path / "fp8"
    run = sweep(
        "run", "--output", tp, "--models", "20m", "--contexts", "512", "--precision", "fp8-tensorwise", *FAST, plan=plan
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert sweep("collect", "--output", tp, plan=plan).returncode == 0
    line = "precision differs from the guide: fp8-tensorwise (guide: bf16)"
    assert line in sweep("status", "--output", tp).stdout
    readme = (tp / "README.md").read_text()
    assert line in readme and "Every curve trained at precision `fp8-tensorwise`" in readme
    assert json.loads((tp / "results.json").read_text())["precision_deviation"].startswith(line)
    result = read(next(tp.glob("curves/*/b1/attempt-1/result.json")), WorkerResult)
    assert result.recipe.training.precision == result.protocol.precision == "fp8-tensorwise"
    audit = tool("throughput_audit.py", "--output", tp, "--allow-test-worker")
    assert line in audit.stdout
    # The scripted worker records no FP8 linears: the audit holds it to the filter's.
    assert audit.returncode == 1 and "precision.fp8_linears" in (tp / "audit.json").read_text()
