"""tools/h200.sh e2e --cpu: the GPU end-to-end run's whole path on the CPU.

Both campaigns on the local scheduler through the local-gpu profile (tools/compute-python),
the scripted worker writing real records; a first call stopped at its time budget
mid-campaign (exit 75, jobs left running), a second resuming to the end, a third finding
every stage complete; then the packed deliverables: audits pass, the report has six pages.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools/h200.sh"
PUBLISH = ROOT / "tools/publish-example.sh"


def _run(tmp_path: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    env = dict(os.environ, SCRIPTED_WORKER_PLAN=str(tmp_path / "plan.json"))
    env.pop("OUT", None)
    return subprocess.run(
        ["bash", str(SCRIPT), "e2e", "--cpu", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_e2e_script_on_cpu_stops_resumes_and_packs(tmp_path):
    # The budget leaves the watcher about 50 s after the script's 45 s reserve and the
    # preflight (imports: several seconds on a loaded 2-core machine). Batches 1 and 2 of two
    # curves are 4 throughput points and 4 optimizer points of two workers each: at 6 s per
    # worker the two campaigns need 72 s and more, so the call stops mid-way with jobs
    # submitted. (Batch 4 would add nothing but time: every batch runs the same path.)
    (tmp_path / "plan.json").write_text(json.dumps({"default": "ok", "ok_seconds": 6}))
    small = ("--max-batch", "2")  # given to every call, so that each summary names the cap the campaign has
    first = _run(tmp_path, "--budget", "100", *small)
    assert first.returncode == 75, first.stdout[-3000:] + first.stderr[-2000:]
    assert "stopped at the budget" in first.stdout
    assert list((tmp_path / "runs/throughput/.local-jobs").glob("*.json")), first.stdout[-3000:]

    second = _run(tmp_path, *small)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    third = _run(tmp_path, *small, timeout=120)  # idempotent: every stage already complete
    assert third.returncode == 0, third.stdout[-3000:]
    assert "created campaign" not in third.stdout + third.stderr

    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["e2e-cpu.tar.gz", "e2e.log", "summary.txt"]
    with tarfile.open(out / "e2e-cpu.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    pack = tmp_path / "unpacked/e2e-cpu"
    assert (pack / "STATE.txt").read_text().strip() == "complete"
    for campaign in ("throughput", "optimizer"):
        audit = json.loads((pack / campaign / "audit.json").read_text())
        assert audit["summary"]["failed"] == 0 and audit["summary"]["passed"] > 100
        for name in ("README.md", "results.csv", "results.json", "throughput.png", "memory.png", "accounting.txt"):
            assert (pack / campaign / name).stat().st_size > 0, name
    # The throughput campaign ran with the window given; the follow-up inherited it.
    manifest = json.loads((pack / "throughput/manifest.json").read_text())
    assert manifest["protocol"]["window_seconds"] == 0.5 and manifest["profile"]["name"] == "local-gpu"
    assert manifest["profile"]["python"].endswith("tools/compute-python")

    from pypdf import PdfReader

    assert len(PdfReader(pack / "report/report.pdf").pages) == 6
    assert len(list((pack / "report").glob("*.png"))) >= 5
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("# e2e cpu: complete") and "report.pdf (6 pages)" in summary

    # Published as a worked example: what a reader opens, without the raw files and the
    # frozen sources (those stay in the tarball, re-auditable from there).
    dest = tmp_path / "docs/example"
    dest.mkdir(parents=True)
    (dest / "stale.txt").write_text("from an earlier publish")
    published = subprocess.run(
        ["bash", str(PUBLISH), str(out / "e2e-cpu.tar.gz"), str(dest)], capture_output=True, text=True, timeout=60
    )
    assert published.returncode == 0, published.stderr
    assert not (dest / "stale.txt").exists() and (dest / "STATE.txt").read_text().strip() == "complete"
    for campaign in ("throughput", "optimizer"):
        names = {p.name for p in (dest / campaign).iterdir()}
        assert {"README.md", "results.csv", "results.json", "throughput.png", "audit.json", "status.txt"} <= names
        assert not {"curves", "frozen", ".local-jobs"} & names
    assert {"optimizer.csv", "optimizer.json"} <= {p.name for p in (dest / "optimizer").iterdir()}
    assert (dest / "report/report.pdf").read_bytes() == (pack / "report/report.pdf").read_bytes()


def test_publish_example_refuses_what_is_not_a_packed_run(tmp_path):
    dest = tmp_path / "example"
    dest.mkdir()
    (dest / "keep.txt").write_text("published before")
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_text("not a tarball")
    for args in ([str(bogus), str(dest)], [str(tmp_path / "missing.tar.gz"), str(dest)], [str(bogus)]):
        done = subprocess.run(["bash", str(PUBLISH), *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.startswith("publish-example: ")
    assert (dest / "keep.txt").read_text() == "published before"


def _kill_jobs(jobs_dir: Path) -> int:
    """SIGKILL each unfinished job's wrapper and everything below it (the job script runs
    in a session of its own), as losing the machine would: nothing writes an end record.
    Returns how many jobs had no end record."""
    import signal

    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    unfinished, doomed = 0, set()
    for record in jobs_dir.glob("*.json"):
        if record.name.endswith(".end.json") or (jobs_dir / f"{record.stem}.end.json").exists():
            continue
        unfinished += 1
        tree = {json.loads(record.read_text())["wrapper_pid"]}
        grown = True
        while grown:
            below = {pid for pid, ppid in parents.items() if ppid in tree} - tree
            tree |= below
            grown = bool(below)
        doomed |= tree
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return unfinished


@pytest.mark.slow
def test_e2e_script_restores_after_a_lost_machine(tmp_path):
    """The state that comes back after a call is enough to go on after the machine is lost:
    jobs running at the loss end as NODE_FAIL, --retry-failed gives them fresh attempts, and
    the run completes with both audits passing (the path the next GPU session depends on)."""
    # The first throughput point takes a minute (30 s asleep, then 30 s as its ok time), the
    # rest 2 s. On the CPU's one slot it is submitted first (smallest batch, curves in manifest
    # order), and the watcher's 30-60 s (the budget less the reserve and the preflight) then
    # always ends inside it: with 20 s for every point it once ended between two jobs, leaving
    # nothing running to lose. The other curve's first point is not slowed: it first runs
    # after the loss, where a minute of it would prove nothing.
    slow = {"outcome": "sleep", "seconds": 30, "then": "ok"}
    points = {"tiny-c128-b1@1": slow, "tiny-c128-b1:optimizer": "ok"}
    (tmp_path / "plan.json").write_text(json.dumps({"default": "ok", "ok_seconds": 2, "points": points}))
    first = _run(tmp_path, "--budget", "95")
    assert first.returncode == 75, first.stdout[-3000:] + first.stderr[-2000:]
    runs = tmp_path / "runs"
    assert _kill_jobs(runs / "throughput/.local-jobs") >= 1  # something was running
    state = tmp_path / "state.tar.gz"
    (tmp_path / "out/e2e-cpu.tar.gz").rename(state)
    import shutil

    shutil.rmtree(runs)  # the machine is gone, and its disk with it

    second = _run(tmp_path, "--state-in", str(state), "--retry-failed", timeout=400)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    assert "restoring state" in second.stdout
    ends = [json.loads(p.read_text())["state"] for p in (runs / "throughput/.local-jobs").glob("*.end.json")]
    assert "NODE_FAIL" in ends
    for campaign in ("throughput", "optimizer"):
        audit = json.loads((runs / campaign / "audit.json").read_text())
        assert audit["summary"]["failed"] == 0, [c for c in audit.get("checks", []) if not c.get("ok", True)][:5]
    assert (runs / "report/report.pdf").stat().st_size > 0
