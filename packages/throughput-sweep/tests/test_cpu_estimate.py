"""The CPU estimate before a local campaign starts, against a scripted compute Python: the
probe's answer is planned (a boundary we own: `python -m tiny_llm cpu-rate`), the arithmetic
and the refusal are the controller's. `tests/test_cpu_estimate_real.py` asks the real one."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from campaign_helpers import sweep
from throughput_schema import Protocol
from throughput_schema.recipe import flops_per_token, load_recipe
from throughput_sweep.cpu_estimate import point_seconds

ROOT = Path(__file__).resolve().parents[3]
RATE = 50e9  # the planned CPU's training FLOP/s


def scripted_python(tmp_path: Path, answer: dict | None) -> Path:
    """A compute Python that answers cpu-rate as planned (or fails), and notes each call."""
    calls = tmp_path / "calls"
    script = tmp_path / "python"
    reply = f"echo '{json.dumps(answer)}'" if answer is not None else "echo 'no module named torch' >&2; exit 1"
    script.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n{reply}\n')
    script.chmod(0o755)
    return script


def local_profile(tmp_path: Path, python: Path, scheduler: str = "local") -> Path:
    path = tmp_path / "profile.yaml"
    extra = "account: throughput\npartition: gpu\n" if scheduler == "slurm" else ""
    path.write_text(f"name: cpu-test\nscheduler: {scheduler}\nmem: ''\npython: {python}\n{extra}")
    return path


def dry_run(tmp_path, python: Path, *models: str, context: int = 128, extra=("--dry-run",), rc=0, profile=None):
    return sweep(
        "run",
        "--output",
        tmp_path / "camp",
        "--profile",
        profile or local_profile(tmp_path, python),
        "--models",
        *models,
        "--contexts",
        str(context),
        "--no-preflight",
        *extra,
        rc=rc,
    )


CPU = {
    "device": "cpu",
    "threads": 2,
    "backend": "cpu-eager",
    "setup_updates": 3,
    "seconds_per_update": 0.5,
    "flops_per_second": RATE,
}


def seconds(model: str, context: int) -> tuple[float, float]:
    """(per update, per first point) from the preset's FLOPs at the planned rate."""
    recipe = load_recipe(ROOT / "configs" / f"{model}.yaml")
    update = flops_per_token(msgspec.structs.replace(recipe.model, context_length=context)) * context / RATE
    return update, point_seconds(update, Protocol(), CPU["setup_updates"])


def test_point_seconds_follow_the_protocol():
    # 28 updates before the windows; each window its 10 s, or its 20 updates where longer.
    assert point_seconds(0.1, Protocol(), 3) == pytest.approx(28 * 0.1 + 5 * 10)
    assert point_seconds(2.0, Protocol(), 3) == pytest.approx(28 * 2.0 + 5 * 40)


def test_each_model_is_estimated_from_the_tiny_presets_timed_update(tmp_path):
    python = scripted_python(tmp_path, CPU)
    said = dry_run(tmp_path, python, "20m", "tiny").stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("-m tiny_llm cpu-rate --config ")
    assert "no GPU here: the points train on the CPU (2 threads, cpu-eager); tiny at context 128" in said
    for model in ("tiny", "20m"):
        update, point = seconds(model, 128)
        assert f"{model} at context 128, batch 1: {update:.2g} s per update, {point:.0f} s for the point" in said


def test_a_point_beyond_the_watchdog_is_refused_unless_allowed(tmp_path):
    python = scripted_python(tmp_path, CPU)
    _, point = seconds("smollm2-135m", 2048)
    assert point > 13 * 60
    refusal = (
        f"on this machine's CPU the first point of smollm2-135m ({point:.0f} s) would outlast "
        "the watchdog's 780 s; run it on a GPU, choose a smaller model (tiny, 20m), or add --allow-slow-cpu"
    )
    refused = dry_run(tmp_path, python, "smollm2-135m", context=2048, extra=(), rc=2)
    assert refused.stderr.strip().splitlines()[-1] == f"throughput-sweep: {refusal}"
    assert "Traceback" not in refused.stderr and not (tmp_path / "camp").exists()
    planned = dry_run(tmp_path, python, "smollm2-135m", context=2048)
    assert f"[sweep] note: the run will refuse: {refusal}" in planned.stderr and "Dry run:" in planned.stdout
    allowed = dry_run(tmp_path, python, "smollm2-135m", context=2048, extra=("--dry-run", "--allow-slow-cpu"))
    assert "smollm2-135m at context 2048, batch 1: " in allowed.stderr and "will refuse" not in allowed.stderr


def test_a_gpu_or_a_broken_python_or_slurm_is_not_estimated(tmp_path):
    gpu = dry_run(tmp_path, scripted_python(tmp_path, {"device": "cuda"}), "smollm2-135m", context=2048)
    assert "no GPU here" not in gpu.stderr and "Dry run:" in gpu.stdout
    broken = dry_run(tmp_path, scripted_python(tmp_path, None), "smollm2-135m", context=2048)
    assert "note: could not time an update with " in broken.stderr
    assert "(no module named torch); no CPU time estimate" in broken.stderr
    (tmp_path / "calls").unlink()
    python = scripted_python(tmp_path, CPU)
    slurm = dry_run(tmp_path, python, "smollm2-135m", context=2048, profile=local_profile(tmp_path, python, "slurm"))
    assert "Dry run:" in slurm.stdout and not (tmp_path / "calls").exists()


def test_fp8_where_the_jobs_cannot_run_it_is_refused_in_one_line_with_nothing_written(tmp_path):
    fp8 = ("--precision", "fp8-tensorwise")
    cpu = dry_run(tmp_path, scripted_python(tmp_path, CPU), "tiny", extra=fp8, rc=2)
    err = cpu.stderr.strip().splitlines()
    assert err[-1] == (
        "throughput-sweep: --precision fp8-tensorwise trains only on a CUDA GPU with FP8 matrix units, and this "
        "campaign's jobs run on this machine's CPU; use --precision bf16 here, or a GPU profile"
    )
    assert "Traceback" not in cpu.stderr and not (tmp_path / "camp").exists()
    # The GPU's compute Python without torchao: the probe's word is the refusal.
    without = {"device": "cuda", "precision_refused": "fp8-tensorwise: no module named torchao"}
    gpu = dry_run(tmp_path, scripted_python(tmp_path, without), "tiny", extra=fp8, rc=2)
    assert gpu.stderr.strip().splitlines()[-1] == (
        "throughput-sweep: the compute environment cannot run --precision fp8-tensorwise: "
        "fp8-tensorwise: no module named torchao"
    )
    assert not (tmp_path / "camp").exists()
    # A dry run plans without running: it says the same as a note.
    planned = dry_run(tmp_path, scripted_python(tmp_path, without), "tiny", extra=(*fp8, "--dry-run"))
    assert "note: the run will refuse: the compute environment cannot run --precision" in planned.stderr
    # A GPU whose compute Python has torchao lets an FP8 campaign through (as the dry run shows).
    able = dry_run(
        tmp_path,
        scripted_python(tmp_path, {"device": "cuda", "precision_refused": None}),
        "tiny",
        extra=(*fp8, "--dry-run"),
    )
    assert "refuse" not in able.stderr and "Dry run:" in able.stdout


def test_an_unknown_precision_is_one_line(tmp_path):
    bad = dry_run(tmp_path, scripted_python(tmp_path, CPU), "tiny", extra=("--precision", "fp4"), rc=2)
    assert bad.stderr.strip() == (
        "throughput-sweep run: argument --precision: 'fp4': unknown precision; use one of bf16, fp8-tensorwise, "
        "fp8-rowwise (default bf16) (see --help)"
    )
    assert not (tmp_path / "camp").exists()
