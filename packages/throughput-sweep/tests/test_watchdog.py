"""The in-allocation watchdog with real child processes (no GPU, no torch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from throughput_schema import EXIT_CODES, ModelConfig, Recipe, TrainingConfig, WorkerResult, read, write_atomic

RECIPE = Recipe(
    name="tiny",
    model=ModelConfig(n_layers=2, d_model=64, n_heads=1, ffn_dim=128, context_length=128),
    training=TrainingConfig(micro_batch_size=1, batch_tokens=128),
)

# A worker that writes its own result with a chosen outcome, then exits with `code`.
WRITER = """
import sys
from throughput_schema import WorkerResult, write_atomic, read, Recipe
from throughput_schema.outcomes import Ok, CudaOom
recipe = read(sys.argv[1], Recipe)
kind = sys.argv[3]
outcome = Ok() if kind == "ok" else CudaOom(phase="setup", message="CUDA out of memory")
write_atomic(sys.argv[2], WorkerResult(outcome=outcome, recipe=recipe, parameters=1, backend="test"))
sys.exit(int(sys.argv[4]))
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    return write_atomic(tmp_path / "recipe.json", RECIPE)


def watchdog(tmp_path: Path, recipe: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "throughput_sweep.node.watchdog", "--recipe", str(recipe), "--tmpdir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
    )


def test_deadline_writes_timeout(tmp_path, recipe):
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    proc = watchdog(tmp_path, recipe, "--deadline-seconds", "1.5", "--grace-seconds", "1",
                    "--result", str(result), "--", sys.executable, "-c", "import time; time.sleep(60)")
    assert time.monotonic() - t0 < 10
    assert proc.returncode == EXIT_CODES["timeout"], proc.stderr
    rec = read(result, WorkerResult)
    assert rec.outcome.__struct_config__.tag == "timeout"
    assert rec.outcome.deadline_seconds == 1.5
    assert rec.recipe == RECIPE and rec.parameters > 0 and rec.exit_code == EXIT_CODES["timeout"]


def test_deadline_kills_a_worker_ignoring_sigterm(tmp_path, recipe):
    result = tmp_path / "result.json"
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    t0 = time.monotonic()
    proc = watchdog(tmp_path, recipe, "--deadline-seconds", "1", "--grace-seconds", "1",
                    "--result", str(result), "--", sys.executable, "-c", code)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == EXIT_CODES["timeout"]
    assert read(result, WorkerResult).outcome.__struct_config__.tag == "timeout"


def test_sigkilled_worker_is_host_oom(tmp_path, recipe):
    result = tmp_path / "result.json"
    proc = watchdog(tmp_path, recipe, "--result", str(result), "--", sys.executable, "-c",
                    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.returncode == EXIT_CODES["host_oom"]
    rec = read(result, WorkerResult)
    assert rec.outcome.__struct_config__.tag == "host_oom"
    assert "signal 9" in rec.outcome.message and "host memory" in rec.outcome.message


def test_failure_record_carries_the_campaign_protocol(tmp_path, recipe):
    # The audit compares every result's protocol with the campaign's; a record the
    # watchdog writes for a crashed worker must say how the point was to be measured.
    from throughput_schema import ClusterProfile, Manifest, Protocol

    protocol = Protocol(window_seconds=2.0, warmup=5)
    manifest = write_atomic(tmp_path / "manifest.json", Manifest(
        kind="throughput", name="c", created_at="now", models=["tiny"], contexts=[128], protocol=protocol,
        profile=ClusterProfile(name="local", scheduler="local"), tool_version="0.1.0"))
    result = tmp_path / "result.json"
    proc = watchdog(tmp_path, recipe, "--manifest", str(manifest), "--result", str(result), "--",
                    sys.executable, "-c", "import sys; sys.exit(1)")
    assert proc.returncode == EXIT_CODES["crashed"], proc.stderr
    assert read(result, WorkerResult).protocol == protocol


def test_segfault_is_crashed(tmp_path, recipe):
    result = tmp_path / "result.json"
    proc = watchdog(tmp_path, recipe, "--result", str(result), "--", sys.executable, "-c",
                    "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert proc.returncode == EXIT_CODES["crashed"]
    rec = read(result, WorkerResult)
    assert rec.outcome.__struct_config__.tag == "crashed" and "SIGSEGV" in rec.outcome.message


def test_nonzero_exit_without_result_is_crashed(tmp_path, recipe):
    result = tmp_path / "result.json"
    proc = watchdog(tmp_path, recipe, "--result", str(result), "--", sys.executable, "-c", "raise SystemExit(13)")
    assert proc.returncode == EXIT_CODES["crashed"]
    rec = read(result, WorkerResult)
    assert rec.outcome.exit_code == 13


@pytest.mark.parametrize(("kind", "code"), [("ok", 0), ("cuda_oom", 3)])
def test_workers_own_result_is_kept(tmp_path, recipe, kind, code):
    result = tmp_path / "result.json"
    proc = watchdog(tmp_path, recipe, "--result", str(result), "--", sys.executable, "-c", WRITER,
                    str(recipe), str(result), kind, str(code))
    assert proc.returncode == code, proc.stderr
    rec = read(result, WorkerResult)
    assert rec.backend == "test" and rec.outcome.__struct_config__.tag == kind


def test_environment_and_caches_are_disposable(tmp_path, recipe):
    result = tmp_path / "result.json"
    dump = tmp_path / "env.txt"
    code = (
        "import os, sys; names = ['TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'];"
        "open(sys.argv[1], 'w').write('\\n'.join(os.environ[n] for n in names));"
        "assert os.path.isdir(os.environ['TRITON_CACHE_DIR'])"
    )
    proc = watchdog(tmp_path, recipe, "--cpus", "8", "--result", str(result), "--", sys.executable, "-c", code, str(dump))
    inductor, triton, omp, mkl = dump.read_text().splitlines()
    assert omp == mkl == "8"
    assert inductor.startswith(str(tmp_path)) and triton.startswith(str(tmp_path))
    assert not Path(inductor).exists() and not Path(triton).exists()  # removed at the end
    assert proc.returncode == EXIT_CODES["crashed"]  # exited 0 without writing a result
    assert "without writing a result" in read(result, WorkerResult).outcome.message


def test_two_workers_under_one_deadline(tmp_path, recipe):
    """Baseline then instrumented: the deadline is shared, and the point's result records the failure."""
    import json

    base, final = tmp_path / "baseline.json", tmp_path / "result.json"
    w1 = json.dumps({"argv": [sys.executable, "-c", WRITER, str(recipe), str(base), "ok", "0"], "result": str(base),
                     "label": "baseline"})
    w2 = json.dumps({"argv": [sys.executable, "-c", "import time; time.sleep(60)"], "result": str(final),
                     "label": "instrumented"})
    proc = watchdog(tmp_path, recipe, "--deadline-seconds", "3", "--grace-seconds", "1", "--mode", "optimizer-timing",
                    "--worker", w1, "--worker", w2)
    assert proc.returncode == EXIT_CODES["timeout"], proc.stderr
    assert read(base, WorkerResult).outcome.__struct_config__.tag == "ok"
    rec = read(final, WorkerResult)
    assert rec.outcome.__struct_config__.tag == "timeout" and rec.mode == "optimizer-timing"


def test_failed_first_worker_skips_the_second(tmp_path, recipe):
    import json

    base, final = tmp_path / "baseline.json", tmp_path / "result.json"
    marker = tmp_path / "second-ran"
    w1 = json.dumps({"argv": [sys.executable, "-c", "raise SystemExit(1)"], "result": str(base), "label": "baseline"})
    w2 = json.dumps({"argv": ["touch", str(marker)], "result": str(final)})
    proc = watchdog(tmp_path, recipe, "--worker", w1, "--worker", w2)
    assert proc.returncode == EXIT_CODES["crashed"]
    assert not marker.exists()
    assert read(base, WorkerResult).outcome.__struct_config__.tag == "crashed"
    assert read(final, WorkerResult).outcome.message.startswith("baseline worker:")


def test_sigterm_is_forwarded_and_recorded_as_cancelled(tmp_path, recipe):
    result = tmp_path / "result.json"
    started = tmp_path / "started"
    code = f"import time, pathlib; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "throughput_sweep.node.watchdog", "--recipe", str(recipe), "--tmpdir", str(tmp_path),
         "--time-limit-minutes", "14", "--term-grace-seconds", "1", "--result", str(result), "--",
         sys.executable, "-c", code],
        stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_CODES["cancelled"]
    assert read(result, WorkerResult).outcome.__struct_config__.tag == "cancelled"


def test_usage_errors_exit_2(tmp_path, recipe):
    assert watchdog(tmp_path, recipe).returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "throughput_sweep.node.watchdog", "--recipe", str(bad), "--result",
                           str(tmp_path / "r.json"), "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_watchdog_imports_no_anyio_or_torch(tmp_path):
    code = ("import sys, throughput_sweep.node.watchdog; bad = {'anyio', 'torch', 'matplotlib', 'yaml'} & set(sys.modules);"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


def test_sigterm_to_every_process_at_once_is_cancelled(tmp_path, recipe):
    """Slurm's scancel signals all processes of the job together, the worker included."""
    result = tmp_path / "result.json"
    pidfile = tmp_path / "worker.pid"
    code = f"import os, time, pathlib; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "throughput_sweep.node.watchdog", "--recipe", str(recipe), "--tmpdir", str(tmp_path),
         "--time-limit-minutes", "14", "--result", str(result), "--", sys.executable, "-c", code],
        stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(pidfile.read_text()), signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_CODES["cancelled"]
    assert read(result, WorkerResult).outcome.__struct_config__.tag == "cancelled"


def test_sigterm_long_before_a_short_time_limit_is_cancelled_not_timeout():
    """A scancel 4 s into a job with a 1-minute limit is a cancellation; near the limit, a time-out."""
    from throughput_sweep.node.watchdog import Watchdog, WorkerSpec

    dog = Watchdog([WorkerSpec(argv=["true"], result="r.json")], recipe=RECIPE, time_limit_seconds=60)
    dog.started = time.monotonic() - 4
    assert dog._stop_outcome(signal.SIGTERM).__struct_config__.tag == "cancelled"
    dog.started = time.monotonic() - 57
    assert dog._stop_outcome(signal.SIGTERM).__struct_config__.tag == "timeout"
    long = Watchdog([WorkerSpec(argv=["true"], result="r.json")], recipe=RECIPE, time_limit_seconds=14 * 60)
    long.started = time.monotonic() - 13.2 * 60
    assert long._stop_outcome(signal.SIGTERM).__struct_config__.tag == "timeout"
