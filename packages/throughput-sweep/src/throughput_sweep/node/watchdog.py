"""The in-allocation parent: runs the worker(s) under one deadline and always leaves a result.

    python -m throughput_sweep.node.watchdog --request ATTEMPT/request.json
        [--grace-seconds 10] [--term-grace-seconds 2] [--tmpdir DIR]

The attempt's `WorkerRequest` says everything else: the workers (`python -m <worker>
benchmark-throughput-worker --request PATH --output PATH`, one for a throughput point; for
an optimizer point the uninstrumented baseline, then the instrumented worker), the
deadline, the job's time limit, the CPUs, and the recipe and protocol of failure records,
which are the same the workers measure.

What it does:
  * Per-job compiler caches in node-local temporary space ($TMPDIR, else /tmp):
    TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, CUDA_CACHE_PATH; removed at the end. What
    outlives the job is the workers' own: the compiled artifacts they load into these caches
    from the campaign's `compiled/` and save there (the request's `compile_cache`).
    OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, NUMEXPR_NUM_THREADS and
    TORCHINDUCTOR_COMPILE_THREADS are set to the request's CPUs, capped at the CPUs the
    process may run on.
  * Runs the workers in order as child processes (each in its own process group) under
    ONE combined deadline that starts when the watchdog starts, so imports and
    compilation count. At the deadline the running worker gets SIGTERM, then SIGKILL
    after --grace-seconds, and a `timeout` result is written unless the worker wrote one.
  * A worker that exits without writing its result gets one written for it: killed by
    SIGKILL -> `host_oom` ("killed by signal 9, likely host memory": the kernel OOM
    killer), another signal -> `crashed` (signal named), a non-zero exit -> `crashed`.
  * SIGTERM/SIGINT/SIGHUP to the watchdog (scancel, Slurm's time limit, the local
    scheduler's cancel) are forwarded to the worker; if it leaves no result within
    --term-grace-seconds a record is written: `timeout` when the job has used its time
    limit (within 60 s, or 10% of a shorter limit), else `cancelled`. Keep the grace
    below Slurm's KillWait.
  * When a worker fails (its own failure result or one written for it), later workers
    do not run and the last worker's result path (the point's result) gets the same
    outcome, its message naming the worker that failed.
  * Exit status mirrors the point's outcome (throughput_schema.EXIT_CODES; ok/capped 0).
    A record the campaign's filesystem refuses (full, or over its quota) is kept on the
    node (throughput_schema.node_local) and the exit status is `storage_full`'s: the
    scheduler's accounting keeps it where nothing else could be written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from throughput_schema import EXIT_CODES, SchemaError, WorkerRequest, read, write_new
from throughput_schema.layout import REQUEST
from throughput_schema.node_local import ResultNotWritten, not_written
from throughput_schema.outcomes import Cancelled, Crashed, Outcome, Timeout, outcome_kind, time_limit_slack
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.recipe import parameter_count
from throughput_schema.records import Hardware, Protocol, Recipe, WorkerIdentity, WorkerResult
from throughput_schema.results import JOB_STARTED_AT_ENV
from throughput_sweep.node.worker_exit import (
    exit_code_for,
    kill_group,
    log,
    now,
    outcome_for_exit,
    signal_name,
    snapshot,
    written_result,
)

WORKER_COMMAND = "benchmark-throughput-worker"
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TORCHINDUCTOR_COMPILE_THREADS",
)


def thread_count(requested: int) -> int:
    """The request's CPUs, but never more threads than CPUs this process may run on.

    A scheduler that does not bind CPUs (the local scheduler, a Slurm without task/affinity)
    leaves the whole machine visible; eight OpenMP threads per job on a two-core machine
    make every timing window a measure of contention instead of the update."""
    return max(1, min(requested, len(os.sched_getaffinity(0))))


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class WorkerSpec:
    argv: list[str]
    result: Path
    label: str = ""


@dataclass
class WatchdogState:
    stop_signal: int | None = None
    unwritten: ResultNotWritten | None = None  # a record the campaign's filesystem refused


class Watchdog:
    def __init__(
        self,
        workers: list[WorkerSpec],
        *,
        recipe: Recipe,
        protocol: Protocol | None = None,
        mode: str = "throughput",
        worker: str = PRODUCTION_WORKER,
        deadline_seconds: float = 13 * 60,
        time_limit_seconds: float | None = None,
        cpus: int = 8,
        grace_seconds: float = 10.0,
        term_grace_seconds: float = 2.0,
        tmp_root: str | None = None,
    ) -> None:
        if not workers:
            raise ValueError("at least one worker is needed")
        self.workers = workers
        self.recipe = recipe
        # The campaign's protocol, so a failure record says how the point was to be measured.
        self.protocol = protocol or Protocol()
        self.mode = mode
        # A failure record names the worker it stands in for, so the audit can tell a
        # test worker's campaign by every result, not by the manifest alone.
        self.worker = worker
        self.deadline_seconds = deadline_seconds
        self.time_limit_seconds = time_limit_seconds
        self.cpus = cpus
        self.grace_seconds = grace_seconds
        self.term_grace_seconds = term_grace_seconds
        self.tmp_root = tmp_root or os.environ.get("TMPDIR") or "/tmp"
        self.state = WatchdogState()
        self.started = time.monotonic()
        self.started_at = now()

    # ------------------------------------------------------------------ records

    def _record(self, outcome: Outcome, started_at: str) -> WorkerResult:
        return WorkerResult(
            outcome=outcome,
            recipe=self.recipe,
            parameters=parameter_count(self.recipe.model),
            protocol=self.protocol,
            mode=self.mode,  # type: ignore[arg-type]
            hardware=Hardware(hostname=socket.gethostname(), python=sys.version.split()[0]),
            started_at=started_at,
            finished_at=now(),
            job_started_at=self.started_at,
            exit_code=exit_code_for(outcome_kind(outcome)),
            worker=WorkerIdentity(module=self.worker, written_by="watchdog"),
        )

    def _write(self, path: Path, outcome: Outcome, started_at: str) -> None:
        record = self._record(outcome, started_at)
        try:
            # Never over a record the worker wrote after all (it may still have been finishing).
            written = write_new(path, record)
        except OSError as exc:
            self.state.unwritten = not_written(exc, path, record)  # a full disk: kept on the node
            log(f"{outcome_kind(outcome)} result not written: {self.state.unwritten}")
            return
        if written:
            log(f"wrote {outcome_kind(outcome)} result to {path}: {outcome.message}")
        else:
            log(f"kept the result found at {path}; not writing {outcome_kind(outcome)}")

    # --------------------------------------------------------------- processes

    def environment(self, cache_root: Path) -> dict[str, str]:
        env = dict(os.environ)
        threads = str(thread_count(self.cpus))
        for name in THREAD_VARIABLES:
            env[name] = threads
        for name, sub in (
            ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
            ("TRITON_CACHE_DIR", "triton"),
            ("CUDA_CACHE_PATH", "cuda"),
        ):
            path = cache_root / sub
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[JOB_STARTED_AT_ENV] = self.started_at
        return env

    def _remaining(self) -> float:
        return self.deadline_seconds - (time.monotonic() - self.started)

    def _stop(self, proc: subprocess.Popen, first: int, grace: float) -> None:
        """Signal the worker's process group, then SIGKILL it after `grace` seconds."""
        for sig, wait in ((first, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        kill_group(proc.pid)  # leftover members of the group (the worker's own children) go too

    def _on_signal(self, signum: int, _frame) -> None:
        if self.state.stop_signal is None:
            self.state.stop_signal = signum

    def _stop_outcome(self, signum: int) -> Outcome:
        elapsed = time.monotonic() - self.started
        name = signal_name(signum)
        # Slurm's time-limit SIGTERM comes at or after the limit; allow for the watchdog
        # starting a little after the job, but never take an early scancel for a time-out
        # (a minute of slack would cover the whole of a short job's limit).
        slack = time_limit_slack(self.time_limit_seconds) if self.time_limit_seconds is not None else 0.0
        if self.time_limit_seconds is not None and elapsed >= self.time_limit_seconds - slack:
            return Timeout(
                phase="allocation",
                deadline_seconds=self.time_limit_seconds,
                message=f"{name} after {elapsed:.0f} s: the job's time limit of {self.time_limit_seconds:.0f} s ended it",
            )
        return Cancelled(phase="allocation", message=f"{name} after {elapsed:.0f} s: the job was cancelled")

    def run_one(self, spec: WorkerSpec, env: dict[str, str]) -> tuple[WorkerResult | None, Outcome | None]:
        """Run one worker: (its own result, None) or (None, the outcome to record)."""
        before = snapshot(spec.result)
        if self.state.stop_signal is not None:
            return None, self._stop_outcome(self.state.stop_signal)
        if self._remaining() <= 0:
            return None, Timeout(
                phase=spec.label or "worker",
                deadline_seconds=self.deadline_seconds,
                message="the watchdog deadline passed before this worker could start",
            )
        log(f"starting {spec.label or 'worker'}: {' '.join(spec.argv)}")
        try:
            proc = subprocess.Popen(spec.argv, env=env, stdin=subprocess.DEVNULL, process_group=0)
        except OSError as exc:
            return None, Crashed(phase=spec.label or "worker", message=f"cannot start worker: {exc}")
        stop: Outcome | None = None
        while True:
            if self.state.stop_signal is not None:
                log(f"got {signal_name(self.state.stop_signal)}: forwarding to the worker")
                self._stop(proc, self.state.stop_signal, self.term_grace_seconds)
                stop = self._stop_outcome(self.state.stop_signal)
                break
            remaining = self._remaining()
            if remaining <= 0:
                log(f"deadline of {self.deadline_seconds:.0f} s reached: stopping the worker")
                self._stop(proc, signal.SIGTERM, self.grace_seconds)
                stop = Timeout(
                    phase=spec.label or "worker",
                    deadline_seconds=self.deadline_seconds,
                    message=f"watchdog deadline of {self.deadline_seconds:.0f} s reached (imports and compilation "
                    "included); the worker was stopped",
                )
                break
            try:
                proc.wait(timeout=min(remaining, 0.2))
                break
            except subprocess.TimeoutExpired:
                continue
        kill_group(proc.pid)  # the group may hold children of a worker that already exited
        if stop is None and proc.returncode in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP):
            # Slurm signals every process of the job at once: ours may still be in flight.
            end = time.monotonic() + 1.0
            while self.state.stop_signal is None and time.monotonic() < end:
                time.sleep(0.05)
        if stop is None and self.state.stop_signal is not None:
            stop = self._stop_outcome(self.state.stop_signal)
        own = written_result(spec.result, before)
        if own is not None:
            return own, None
        if stop is not None:
            return None, stop
        log(f"worker ended with status {proc.returncode} and no result")
        return None, outcome_for_exit(proc.returncode)

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        cache_root = Path(tempfile.mkdtemp(prefix="throughput-job-", dir=self.tmp_root))
        final_kind = "ok"
        try:
            env = self.environment(cache_root)
            last = self.workers[-1]
            for index, spec in enumerate(self.workers):
                started_at = now()
                own, outcome = self.run_one(spec, env)
                if own is not None:
                    kind = outcome_kind(own.outcome)
                    if kind in ("ok", "capped"):
                        final_kind = kind
                        continue
                    outcome = own.outcome
                else:
                    assert outcome is not None
                    self._write(spec.result, outcome, started_at)
                final_kind = outcome_kind(outcome)
                if spec is not last:
                    label = spec.label or f"worker {index + 1}"
                    carried = msgspec.structs.replace(outcome, message=f"{label} worker: {outcome.message}")
                    if snapshot(last.result) is None:
                        self._write(last.result, carried, started_at)
                break
        finally:
            shutil.rmtree(cache_root, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.state.unwritten is not None:
            final_kind = "storage_full"  # the accounting's exit status is the only record left
        code = exit_code_for(final_kind)
        log(f"done: {final_kind} (exit {code})")
        return code


def workers_for(request: WorkerRequest, path: Path) -> list[WorkerSpec]:
    """The worker processes of the attempt whose request is at `path`, in order."""

    def worker(output: str, label: str, optimizer_timing: bool) -> WorkerSpec:
        argv = [request.python, "-m", request.worker, WORKER_COMMAND, "--request", str(path), "--output", output]
        return WorkerSpec(argv=argv + ["--optimizer-timing"] * optimizer_timing, result=Path(output), label=label)

    if request.mode == "optimizer-timing":
        return [worker(request.baseline, "baseline", False), worker(request.result, "instrumented", True)]
    return [worker(request.result, "", False)]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m throughput_sweep.node.watchdog", description=__doc__.splitlines()[0])
    p.add_argument("--request", required=True, type=Path, help=f"the attempt's {REQUEST}, or the attempt folder")
    p.add_argument("--grace-seconds", type=float, default=10.0, help="SIGTERM to SIGKILL at the deadline")
    p.add_argument("--term-grace-seconds", type=float, default=2.0, help="for a worker's result after a stop signal")
    p.add_argument("--tmpdir", help="node-local temporary space (default $TMPDIR or /tmp)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    path = args.request / REQUEST if args.request.is_dir() else args.request
    try:
        request = read(path, WorkerRequest)
    except SchemaError as exc:
        print(f"watchdog: {exc}", file=sys.stderr)
        return EXIT_CODES["usage"]
    watchdog = Watchdog(
        workers_for(request, path.absolute()),
        recipe=request.recipe,
        protocol=request.protocol,
        mode=request.mode,
        worker=request.worker,
        deadline_seconds=request.deadline_seconds,
        time_limit_seconds=request.time_limit_seconds,
        cpus=request.cpus,
        grace_seconds=args.grace_seconds,
        term_grace_seconds=args.term_grace_seconds,
        tmp_root=args.tmpdir,
    )
    return watchdog.run()


if __name__ == "__main__":
    sys.exit(main())
