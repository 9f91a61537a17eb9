"""Bad input to every command line: one clear line on stderr, a non-zero exit, no traceback,
and every file already on disk byte-for-byte unchanged (the whole tree is hashed before/after).

The real console scripts run as subprocesses (`.venv/bin/...` or `python -m`). Campaigns come
from the local scheduler with the scripted worker: no Slurm, no GPU.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import ROOT, run_program

pytestmark = pytest.mark.slow  # every command line against campaigns built on disk

BIN = Path(sys.executable).parent
SWEEP = [sys.executable, "-m", "throughput_sweep.cli"]
TINY = [sys.executable, "-m", "tiny_llm"]
# Every campaign made here is the scripted worker's.
AUDIT = [str(BIN / "throughput-audit"), "--allow-test-worker"]
REPORT = [str(BIN / "throughput-report"), "--allow-test-worker"]
SCHEMA = [str(BIN / "throughput-schema")]
FAST = ["--worker", "scripted_worker", "--window-seconds", "1", "--poll-max-seconds", "1", "--no-progress"]


def run(argv, plan: Path | None = None, crash: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_program([], *argv, plan=plan, crash=crash, timeout=timeout)


def tree_hash(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder`: content hash (files), mode, and the set of names."""
    found = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_file():
            found[key] = hashlib.sha256(p.read_bytes()).hexdigest() + f" {p.stat().st_mode:o}"
        else:
            found[key] = f"dir {p.stat().st_mode:o}"
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Campaigns to misuse: a complete throughput campaign, its optimizer follow-up, an
    incomplete one, and a non-campaign folder."""
    base = tmp_path_factory.mktemp("made")
    plan = base / "plan.json"
    plan.write_text(
        json.dumps(
            {"default": "ok", "ok_seconds": 0.05, "points": {"20m-c512-b4": "cuda_oom", "20m-c1024-b4": "cuda_oom"}}
        )
    )
    r = run([*SWEEP, "run", "--output", base / "done", "--models", "20m", "--contexts", "512", "1024", *FAST], plan)
    assert r.returncode == 0, r.stderr
    r = run([*SWEEP, "run", "--optimizer-timing-from", base / "done", "--output", base / "opt", *FAST], plan)
    assert r.returncode == 0, r.stderr
    r = run(
        [*SWEEP, "run", "--output", base / "incomplete", "--models", "20m", "--contexts", "512", *FAST],
        plan,
        crash="before-intent",
    )
    assert r.returncode == -9, r.stderr
    (base / "plain").mkdir()
    (base / "plain" / "notes.txt").write_text("not a campaign\n")
    return base


def _corrupt(rel: str, data: str):
    def change(w: Path) -> None:
        path = next(iter(sorted(w.glob(rel))))
        path.write_text(data)

    return change


def _newer(rel: str):
    def change(w: Path) -> None:
        path = next(iter(sorted(w.glob(rel))))
        obj = json.loads(path.read_text())
        obj["schema_version"] = 99
        path.write_text(json.dumps(obj))

    return change


# 300 random bytes: not UTF-8 text (the same bytes on every run).
BINARY = random.Random(17).randbytes(300)


def _write_bytes(rel: str, data: bytes):
    """Replace (or create) the file at `rel` (a glob) with `data`."""

    def change(w: Path) -> None:
        found = sorted(w.glob(rel))
        path = found[0] if found else w / rel
        path.write_bytes(data)

    return change


def _write(name: str, text: str):
    def change(w: Path) -> None:
        (w / name).write_text(text)

    return change


def _edit_frozen(w: Path) -> None:
    path = w / "done/frozen/configs/20m.yaml"
    path.chmod(0o644)
    path.write_text(path.read_text() + "\n# edited\n")


def _profile(**fields):
    def change(w: Path) -> None:
        import msgspec
        import yaml

        from throughput_sweep.profiles import embedded_local_profile

        raw = msgspec.to_builtins(embedded_local_profile())
        raw.update(fields)
        (w / "p.yaml").write_text(yaml.safe_dump(raw))

    return change


NEW = ["run", "--output", "{w}/new", "--models", "20m", "--contexts", "512"]
RESUME = ["run", "--output", "{w}/done", "--resume"]

# (id, command, argv with {w} for the work folder, a word the message must hold, setup)
# fmt: off
CASES = [
    # --- throughput-sweep run: creating
    ("malformed-yaml-profile", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "malformed YAML", _write("p.yaml", "name: [x,\n")),
    ("binary-profile", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "not UTF-8", _write_bytes("p.yaml", BINARY)),
    ("profile-not-a-mapping", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "expected a mapping", _write("p.yaml", "- a\n- b\n")),
    ("profile-wrong-type", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "cpus_per_task", _profile(cpus_per_task="eight")),
    ("profile-unknown-field", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "acount", _profile(acount="typo")),
    ("profile-zero-gpus", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "gpus_per_job", _profile(gpus_per_job=0)),
    ("profile-unknown-scheduler", SWEEP, [*NEW, "--profile", "{w}/p.yaml"], "scheduler", _profile(scheduler="pbs")),
    ("context-not-power-of-two", SWEEP, ["run", "--output", "{w}/new", "--models", "20m", "--contexts", "768"], "not supported", None),
    ("context-too-large", SWEEP, ["run", "--output", "{w}/new", "--models", "20m", "--contexts", "16384"], "not supported", None),
    ("context-negative", SWEEP, ["run", "--output", "{w}/new", "--contexts", "-512"], "positive", None),
    ("context-not-a-number", SWEEP, ["run", "--output", "{w}/new", "--contexts", "2k"], "whole number", None),
    ("context-twice", SWEEP, ["run", "--output", "{w}/new", "--models", "20m", "--contexts", "512", "512"], "twice", None),
    ("max-batch-zero", SWEEP, [*NEW, "--max-batch", "0"], "positive", None),
    ("max-batch-not-power-of-two", SWEEP, [*NEW, "--max-batch", "12"], "power of two", None),
    ("windows-zero", SWEEP, [*NEW, "--windows", "0"], "positive", None),
    ("warmup-negative", SWEEP, [*NEW, "--warmup", "-1"], "negative", None),
    ("window-seconds-infinite", SWEEP, [*NEW, "--window-seconds", "inf"], "positive number", None),
    ("model-twice", SWEEP, ["run", "--output", "{w}/new", "--models", "20m", "20m", "--contexts", "512"], "twice", None),
    ("model-path-like", SWEEP, ["run", "--output", "{w}/new", "--models", "../20m", "--contexts", "512"], "preset name", None),
    ("output-is-a-non-campaign-folder", SWEEP, ["run", "--output", "{w}/plain", "--models", "20m", "--contexts", "512"], "already exists", None),
    ("output-under-a-file", SWEEP, ["run", "--output", "{w}/plain/notes.txt/new", "--models", "20m", "--contexts", "512"], "notes.txt", None),
    ("missing-output-argument", SWEEP, ["run", "--models", "20m"], "--output", None),
    ("unknown-subcommand", SWEEP, ["sweep-everything"], "invalid choice", None),
    # --- throughput-sweep run: resuming and follow-ups
    ("resume-with-other-contexts", SWEEP, [*RESUME, "--contexts", "512", "2048"], "new campaign", None),
    ("resume-with-other-models", SWEEP, [*RESUME, "--models", "90m"], "new campaign", None),
    ("resume-with-other-protocol", SWEEP, [*RESUME, "--window-seconds", "3"], "protocol is frozen", None),
    ("resume-with-other-profile", SWEEP, [*RESUME, "--profile", "local-slurm"], "profile", None),
    ("resume-after-frozen-file-edited", SWEEP, RESUME, "frozen files changed", _edit_frozen),
    ("resume-newer-schema-manifest", SWEEP, RESUME, "newer", _newer("done/manifest.json")),
    ("optimizer-from-incomplete-parent", SWEEP, ["run", "--optimizer-timing-from", "{w}/incomplete", "--output", "{w}/new"], "not complete", None),
    ("optimizer-from-optimizer", SWEEP, ["run", "--optimizer-timing-from", "{w}/opt", "--output", "{w}/new"], "not a throughput campaign", None),
    ("optimizer-other-contexts", SWEEP, ["run", "--optimizer-timing-from", "{w}/done", "--output", "{w}/new", "--contexts", "512"], "inherits", None),
    ("optimizer-from-non-campaign", SWEEP, ["run", "--optimizer-timing-from", "{w}/plain", "--output", "{w}/new"], "not a campaign", None),
    # --- status / collect / reconcile on damaged campaigns
    ("status-truncated-intent", SWEEP, ["status", "--output", "{w}/done"], "intent.json", _corrupt("done/curves/20m-c512/b1/attempt-1/intent.json", '{"token": "ts')),
    ("status-garbage-result", SWEEP, ["status", "--output", "{w}/done"], "result.json", _corrupt("done/curves/20m-c512/b2/attempt-1/result.json", "\x00\x01garbage")),
    ("collect-empty-receipt", SWEEP, ["collect", "--output", "{w}/done"], "receipt.json", _corrupt("done/curves/20m-c1024/b1/attempt-1/receipt.json", "")),
    ("collect-newer-schema-result", SWEEP, ["collect", "--output", "{w}/done"], "newer", _newer("done/curves/20m-c512/b1/attempt-1/result.json")),
    ("status-binary-result", SWEEP, ["status", "--output", "{w}/done"], "not UTF-8", _write_bytes("done/curves/20m-c512/b2/attempt-1/result.json", BINARY)),
    ("collect-binary-receipt", SWEEP, ["collect", "--output", "{w}/done"], "not UTF-8", _write_bytes("done/curves/20m-c1024/b1/attempt-1/receipt.json", BINARY)),
    ("resume-binary-manifest", SWEEP, RESUME, "not UTF-8", _write_bytes("done/manifest.json", BINARY)),
    ("status-of-non-campaign", SWEEP, ["status", "--output", "{w}/plain"], "not a campaign", None),
    ("reconcile-unknown-token", SWEEP, ["reconcile", "--output", "{w}/done", "--token", "tsw-nope", "--none"], "no intent", None),
    ("reconcile-settled-token-bad-id", SWEEP, ["reconcile", "--output", "{w}/incomplete", "--token", "x", "--job-id", "1;rm"], "numeric job id", None),
    # --- python -m tiny_llm
    ("tiny-malformed-yaml", TINY, ["describe", "--config", "{w}/bad.yaml"], "bad.yaml", _write("bad.yaml", "model: {n_layers: [\n")),
    ("tiny-typo-in-preset", TINY, ["describe", "--config", "{w}/typo.yaml"], "context_lenght", _write("typo.yaml", (ROOT / "configs/20m.yaml").read_text().replace("context_length", "context_lenght"))),
    ("tiny-unknown-set-key", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "model.bogus=1"], "unknown key", None),
    ("tiny-set-wrong-type", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "model.n_layers=abc"], "n_layers", None),
    ("tiny-set-without-equals", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "model.n_layers"], "model.n_layers", None),
    ("tiny-zero-batch", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "training.micro_batch_size=0"], "micro_batch_size", None),
    ("tiny-negative-batch", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "training.micro_batch_size=-4"], "micro_batch_size", None),
    ("tiny-context-not-power-of-two", TINY, ["describe", "--config", "configs/20m.yaml", "--set", "model.context_length=1000"], "power of two", None),
    ("tiny-binary-config", TINY, ["describe", "--config", "{w}/bin.yaml"], "not UTF-8", _write_bytes("bin.yaml", BINARY)),
    ("tiny-latin1-config", TINY, ["describe", "--config", "{w}/latin1.yaml"], "not UTF-8", _write_bytes("latin1.yaml", ((ROOT / "configs/20m.yaml").read_text() + "# café\n").encode("latin-1"))),
    ("tiny-missing-config", TINY, ["describe", "--config", "{w}/none.yaml"], "none.yaml", None),
    # --- throughput-audit
    ("audit-non-campaign", AUDIT, ["--output", "{w}/plain", "--no-slurm"], "campaign", None),
    ("audit-missing-folder", AUDIT, ["--output", "{w}/missing", "--no-slurm"], "missing", None),
    ("audit-missing-argument", AUDIT, ["--no-slurm"], "--output", None),
    ("audit-newer-schema-manifest", AUDIT, ["--output", "{w}/done", "--no-slurm"], "newer", _newer("done/manifest.json")),
    ("audit-binary-manifest", AUDIT, ["--output", "{w}/done", "--no-slurm"], "not UTF-8", _write_bytes("done/manifest.json", BINARY)),
    # --- throughput-report
    ("report-binary-result", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "--output", "{w}/rep"], "not UTF-8", _write_bytes("opt/curves/20m-c512/b1/attempt-1/result.json", BINARY)),
    ("report-binary-bursts", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "--output", "{w}/rep"], "not UTF-8", _write_bytes("opt/curves/20m-c512/b1/attempt-1/bursts.jsonl", BINARY)),
    ("report-overlapping-inputs", REPORT, ["--throughput", "{w}/done", "{w}/done", "--optimizer", "{w}/opt", "{w}/opt", "--output", "{w}/rep"], "", None),
    ("report-optimizer-is-throughput", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/done", "--output", "{w}/rep"], "", None),
    ("report-unpaired-counts", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "{w}/opt", "--output", "{w}/rep"], "", None),
    ("report-incomplete-parent", REPORT, ["--throughput", "{w}/incomplete", "--optimizer", "{w}/opt", "--output", "{w}/rep"], "", None),
    ("report-output-holds-a-report", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "--output", "{w}/plain"], "never overwritten", _write("plain/report.pdf", "%PDF-old")),
    ("report-missing-optimizer", REPORT, ["--throughput", "{w}/done", "--output", "{w}/rep"], "--optimizer", None),
    ("report-zero-tokens-per-update", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "--output", "{w}/rep", "--tokens-per-update", "0"], "must be positive", None),
    ("report-tokens-per-update-no-point", REPORT, ["--throughput", "{w}/done", "--optimizer", "{w}/opt", "--output", "{w}/rep", "--tokens-per-update", "1000"], "no fitting point", None),
    # --- throughput-schema
    ("schema-validate-truncated", SCHEMA, ["validate", "worker-result", "{w}/trunc.json"], "trunc.json", _write("trunc.json", '{"outcome": ')),
    ("schema-validate-binary", SCHEMA, ["validate", "worker-result", "{w}/bin.json"], "not UTF-8", _write_bytes("bin.json", BINARY)),
    ("schema-validate-newer", SCHEMA, ["validate", "manifest", "{w}/done/manifest.json"], "newer", _newer("done/manifest.json")),
    ("schema-validate-missing", SCHEMA, ["validate", "worker-result", "{w}/none.json"], "none.json", None),
    ("schema-unknown-kind", SCHEMA, ["validate", "result", "{w}/done/manifest.json"], "invalid choice", None),
    ("schema-export-into-a-file", SCHEMA, ["export", "--output", "{w}/plain/notes.txt"], "notes.txt", None),
]
# fmt: on


@pytest.mark.parametrize("case, command, argv, words, setup", CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line_nonzero_nothing_changed(made, tmp_path, case, command, argv, words, setup):
    work = tmp_path / "w"
    shutil.copytree(made, work, symlinks=True)
    if setup is not None:
        setup(work)
    before = tree_hash(work)
    r = run([*command, *[a.format(w=work) for a in argv]], plan=made / "plan.json", timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode not in (0, -9), (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert words in lines[0], lines[0]
    assert tree_hash(work) == before


def test_audit_reports_a_truncated_result_as_a_failed_check(made, tmp_path):
    """For the audit a damaged file is a finding, not a usage error: exit 1, the file named in a
    FAIL line, and no file of the campaign changed (only audit.json/accounting.txt are added)."""
    work = tmp_path / "w"
    shutil.copytree(made / "done", work)
    _corrupt("curves/20m-c512/b1/attempt-1/result.json", '{"outcome": {"ki')(work)
    before = tree_hash(work)
    r = run([*AUDIT, "--output", work, "--no-slurm"])
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "FAIL files.decode" in r.stdout and "result.json" in r.stdout
    after = tree_hash(work)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"audit.json", "accounting.txt"}
