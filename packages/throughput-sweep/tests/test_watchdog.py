"""The in-allocation watchdog with real child processes (no GPU, no torch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from throughput_schema import (
    EXIT_CODES,
    ModelConfig,
    PointSpec,
    Protocol,
    Recipe,
    TrainingConfig,
    WorkerRequest,
    WorkerResult,
    read,
    write_atomic,
)

RECIPE = Recipe(
    name="tiny",
    model=ModelConfig(n_layers=2, d_model=64, n_heads=1, ffn_dim=128, context_length=128),
    training=TrainingConfig(micro_batch_size=1, batch_tokens=128),
)

# Every test worker is a module run as the request says: `python -m MODULE
# benchmark-throughput-worker --request PATH --output PATH [--optimizer-timing]`.
PRELUDE = """
import sys
OUTPUT = sys.argv[sys.argv.index("--output") + 1]
REQUEST = sys.argv[sys.argv.index("--request") + 1]
TIMING = "--optimizer-timing" in sys.argv
"""

# A worker that writes its own result with a chosen outcome, then exits with `code`.
WRITER = """
from throughput_schema import WorkerRequest, WorkerResult, read, write_atomic
from throughput_schema.outcomes import Ok, CudaOom
from throughput_schema.records import WorkerIdentity
def write(kind, code):
    recipe = read(REQUEST, WorkerRequest).recipe
    outcome = Ok() if kind == "ok" else CudaOom(phase="setup", message="CUDA out of memory")
    write_atomic(OUTPUT, WorkerResult(outcome=outcome, recipe=recipe, parameters=1, backend="test", worker=WorkerIdentity(module="tiny_llm")))
    sys.exit(code)
"""


def make_request(tmp_path: Path, code: str, *, mode: str = "throughput", **fields) -> Path:
    """request.json in tmp_path for a worker module running `code`; `fields` override the request's."""
    mods = tmp_path / "mods"
    mods.mkdir(exist_ok=True)
    name = f"worker{len(list(mods.glob('*.py')))}"
    (mods / f"{name}.py").write_text(PRELUDE + code)
    request = WorkerRequest(
        point=PointSpec(model="tiny", context_length=128, batch_size=1, mode=mode),
        recipe=RECIPE,
        protocol=fields.pop("protocol", Protocol()),
        campaign=str(tmp_path),
        python=sys.executable,
        pythonpath=[str(mods)],
        worker=name,
        result=str(tmp_path / "result.json"),
        baseline=str(tmp_path / "baseline.json") if mode == "optimizer-timing" else "",
        **fields,
    )
    return write_atomic(tmp_path / "request.json", request)


def _argv(tmp_path: Path, request: Path, args) -> tuple[list[str], dict]:
    record = read(request / "request.json" if request.is_dir() else request, WorkerRequest)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(record.pythonpath)}
    argv = [
        sys.executable,
        "-m",
        "throughput_sweep.node.watchdog",
        "--request",
        str(request),
        "--tmpdir",
        str(tmp_path),
        *args,
    ]
    return argv, env


def watchdog(tmp_path: Path, request: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    argv, env = _argv(tmp_path, request, args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


def start_watchdog(tmp_path: Path, request: Path, *args: str) -> subprocess.Popen:
    argv, env = _argv(tmp_path, request, args)
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)


def test_deadline_writes_timeout(tmp_path):
    request = make_request(tmp_path, "import time; time.sleep(60)", deadline_seconds=1.5)
    t0 = time.monotonic()
    proc = watchdog(tmp_path, request, "--grace-seconds", "1")
    assert time.monotonic() - t0 < 10
    assert proc.returncode == EXIT_CODES["timeout"], proc.stderr
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.outcome.__struct_config__.tag == "timeout"
    assert rec.outcome.deadline_seconds == 1.5
    assert rec.recipe == RECIPE and rec.parameters > 0 and rec.exit_code == EXIT_CODES["timeout"]


def test_deadline_kills_a_worker_ignoring_sigterm(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    request = make_request(tmp_path, code, deadline_seconds=1)
    t0 = time.monotonic()
    proc = watchdog(tmp_path, request, "--grace-seconds", "1")
    assert time.monotonic() - t0 < 10
    assert proc.returncode == EXIT_CODES["timeout"]
    assert read(tmp_path / "result.json", WorkerResult).outcome.__struct_config__.tag == "timeout"


def test_sigkilled_worker_is_host_oom(tmp_path):
    request = make_request(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    proc = watchdog(tmp_path, request)
    assert proc.returncode == EXIT_CODES["host_oom"]
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.outcome.__struct_config__.tag == "host_oom"
    assert "signal 9" in rec.outcome.message and "host memory" in rec.outcome.message


def test_failure_record_carries_the_requests_recipe_and_protocol(tmp_path):
    # The audit compares every result's protocol with the campaign's; a record the
    # watchdog writes for a crashed worker must say how the point was to be measured.
    protocol = Protocol(window_seconds=2.0, warmup=5)
    request = make_request(tmp_path, "sys.exit(1)", protocol=protocol)
    proc = watchdog(tmp_path, request)
    assert proc.returncode == EXIT_CODES["crashed"], proc.stderr
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.protocol == protocol and rec.recipe == RECIPE
    # ... and name the worker it stands in for, so a test worker's campaign is known by
    # every result, failures included.
    assert (rec.worker.module, rec.worker.written_by) == (read(request, WorkerRequest).worker, "watchdog")


def test_the_worker_gets_the_request_and_its_output(tmp_path):
    dump = tmp_path / "argv.txt"
    request = make_request(
        tmp_path, f"open({str(dump)!r}, 'w').write(' '.join(sys.argv[1:]))\n" + WRITER + "write('ok', 0)\n"
    )
    assert watchdog(tmp_path, tmp_path).returncode == 0  # the attempt folder names its request too
    assert dump.read_text() == f"benchmark-throughput-worker --request {request} --output {tmp_path / 'result.json'}"


def test_segfault_is_crashed(tmp_path):
    request = make_request(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    proc = watchdog(tmp_path, request)
    assert proc.returncode == EXIT_CODES["crashed"]
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.outcome.__struct_config__.tag == "crashed" and "SIGSEGV" in rec.outcome.message


def test_nonzero_exit_without_result_is_crashed(tmp_path):
    proc = watchdog(tmp_path, make_request(tmp_path, "raise SystemExit(13)"))
    assert proc.returncode == EXIT_CODES["crashed"]
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.outcome.exit_code == 13


@pytest.mark.parametrize(("kind", "code"), [("ok", 0), ("cuda_oom", 3)])
def test_workers_own_result_is_kept(tmp_path, kind, code):
    proc = watchdog(tmp_path, make_request(tmp_path, WRITER + f"write({kind!r}, {code})\n"))
    assert proc.returncode == code, proc.stderr
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.backend == "test" and rec.outcome.__struct_config__.tag == kind


def test_environment_and_caches_are_disposable(tmp_path):
    dump = tmp_path / "env.txt"
    code = (
        "import os; names = ['TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'];"
        f"open({str(dump)!r}, 'w').write('\\n'.join(os.environ[n] for n in names));"
        "assert os.path.isdir(os.environ['TRITON_CACHE_DIR'])"
    )
    proc = watchdog(tmp_path, make_request(tmp_path, code, cpus=6))
    inductor, triton, omp, mkl = dump.read_text().splitlines()
    assert omp == mkl == str(min(6, len(os.sched_getaffinity(0))))
    assert inductor.startswith(str(tmp_path)) and triton.startswith(str(tmp_path))
    assert not Path(inductor).exists() and not Path(triton).exists()  # removed at the end
    assert proc.returncode == EXIT_CODES["crashed"]  # exited 0 without writing a result
    assert "without writing a result" in read(tmp_path / "result.json", WorkerResult).outcome.message


def test_threads_never_exceed_the_cpus_the_job_may_run_on(tmp_path):
    """A request for 8 CPUs on one usable CPU runs one thread, not eight fighting for it."""
    dump = tmp_path / "threads.txt"
    code = f"import os; open({str(dump)!r}, 'w').write(os.environ['OMP_NUM_THREADS'])"
    argv, env = _argv(tmp_path, make_request(tmp_path, code, cpus=8), ())
    one = min(os.sched_getaffinity(0))
    subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, {one}),
    )
    assert dump.read_text() == "1"


def test_two_workers_under_one_deadline(tmp_path):
    """Baseline then instrumented: the deadline is shared, and the point's result records the failure."""
    code = WRITER + "if TIMING:\n    import time; time.sleep(60)\nwrite('ok', 0)\n"
    request = make_request(tmp_path, code, mode="optimizer-timing", deadline_seconds=3)
    proc = watchdog(tmp_path, request, "--grace-seconds", "1")
    assert proc.returncode == EXIT_CODES["timeout"], proc.stderr
    assert read(tmp_path / "baseline.json", WorkerResult).outcome.__struct_config__.tag == "ok"
    rec = read(tmp_path / "result.json", WorkerResult)
    assert rec.outcome.__struct_config__.tag == "timeout" and rec.mode == "optimizer-timing"


def test_failed_first_worker_skips_the_second(tmp_path):
    marker = tmp_path / "second-ran"
    code = f"if not TIMING:\n    raise SystemExit(1)\nopen({str(marker)!r}, 'w').close()\n"
    proc = watchdog(tmp_path, make_request(tmp_path, code, mode="optimizer-timing"))
    assert proc.returncode == EXIT_CODES["crashed"]
    assert not marker.exists()
    assert read(tmp_path / "baseline.json", WorkerResult).outcome.__struct_config__.tag == "crashed"
    assert read(tmp_path / "result.json", WorkerResult).outcome.message.startswith("baseline worker:")


def test_sigterm_is_forwarded_and_recorded_as_cancelled(tmp_path):
    started = tmp_path / "started"
    code = f"import time, pathlib; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    request = make_request(tmp_path, code, time_limit_seconds=14 * 60)
    proc = start_watchdog(tmp_path, request, "--term-grace-seconds", "1")
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_CODES["cancelled"]
    assert read(tmp_path / "result.json", WorkerResult).outcome.__struct_config__.tag == "cancelled"


def test_usage_errors_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for args in ([], ["--request", str(bad)], ["--request", str(tmp_path / "missing.json")]):
        proc = subprocess.run(
            [sys.executable, "-m", "throughput_sweep.node.watchdog", *args], capture_output=True, text=True
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_watchdog_imports_no_anyio_or_torch(tmp_path):
    code = (
        "import sys, throughput_sweep.node.watchdog; bad = {'anyio', 'torch', 'matplotlib', 'yaml'} & set(sys.modules);"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


def test_sigterm_to_every_process_at_once_is_cancelled(tmp_path):
    """Slurm's scancel signals all processes of the job together, the worker included."""
    pidfile = tmp_path / "worker.pid"
    code = f"import os, time, pathlib; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); time.sleep(60)"
    proc = start_watchdog(tmp_path, make_request(tmp_path, code, time_limit_seconds=14 * 60))
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(pidfile.read_text()), signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_CODES["cancelled"]
    assert read(tmp_path / "result.json", WorkerResult).outcome.__struct_config__.tag == "cancelled"


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
