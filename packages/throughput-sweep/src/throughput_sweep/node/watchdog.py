"""The in-allocation parent: runs the worker(s) under one deadline and always leaves a result.

    python -m throughput_sweep.node.watchdog --recipe RECIPE.json [--context-length L --batch-size B]
        [--mode throughput|optimizer-timing] [--deadline-minutes 13 | --deadline-seconds S]
        [--time-limit-minutes 14] [--cpus 8] [--grace-seconds 10] [--term-grace-seconds 2]
        (--worker '{"argv": [...], "result": "PATH", "label": "baseline"}' ...
         | --result PATH -- WORKER ARGV...)

It runs from the campaign's frozen copy with the compute node's Python, so it uses only
the standard library, msgspec and throughput_schema (never torch, never anyio).

What it does:
  * Per-job compiler caches in node-local temporary space ($TMPDIR, else /tmp):
    TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, CUDA_CACHE_PATH; removed at the end.
    OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, NUMEXPR_NUM_THREADS and
    TORCHINDUCTOR_COMPILE_THREADS are set to --cpus.
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
    limit (within 60 s, or 10% of a shorter limit), else `cancelled`. Keep the grace below Slurm's KillWait.
  * When a worker fails (its own failure result or one written for it), later workers
    do not run and the last worker's result path (the point's result) gets the same
    outcome, its message naming the worker that failed.
  * Exit status mirrors the point's outcome (throughput_schema.EXIT_CODES; ok/capped 0).
--context-length/--batch-size apply only context and batch to the recipe (no protocol):
pass the point's fully resolved recipe file when failure records must match it exactly.
A result "written by the worker" is one whose file changed since the worker started and
decodes as a WorkerResult; anything else is replaced by the watchdog's record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from throughput_schema import EXIT_CODES, SchemaError, read, write_atomic
from throughput_schema.outcomes import Cancelled, Crashed, HostOom, Outcome, Timeout
from throughput_schema.recipe import parameter_count, with_point
from throughput_schema.records import Hardware, Manifest, Protocol, Recipe, WorkerResult

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TORCHINDUCTOR_COMPILE_THREADS",
)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class WorkerSpec:
    argv: list[str]
    result: Path
    label: str = ""


@dataclass
class _State:
    stop_signal: int | None = None
    events: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _log(message: str) -> None:
    print(f"[watchdog {datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def exit_code_for(kind: str) -> int:
    if kind in ("ok", "capped"):
        return 0
    return EXIT_CODES.get(kind, EXIT_CODES["crashed"])


def _snapshot(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _written_result(path: Path, before: tuple | None) -> WorkerResult | None:
    now = _snapshot(path)
    if now is None or now == before:
        return None
    try:
        return read(path, WorkerResult)
    except SchemaError as exc:
        _log(f"result {path} is not a valid worker result ({exc}); replacing it")
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def outcome_for_exit(returncode: int) -> Outcome:
    """The outcome of a worker that ended on its own without writing a result."""
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGKILL:
            return HostOom(
                phase="worker",
                message="worker killed by signal 9 (SIGKILL) without writing a result, likely host memory "
                "(the kernel OOM killer)",
            )
        return Crashed(
            phase="worker",
            exit_code=returncode,
            message=f"worker killed by signal {sig} ({_signal_name(sig)}) without writing a result",
        )
    if returncode == 0:
        return Crashed(phase="worker", exit_code=0, message="worker exited 0 without writing a result")
    return Crashed(phase="worker", exit_code=returncode, message=f"worker exited {returncode} without writing a result")


class Watchdog:
    def __init__(
        self,
        workers: list[WorkerSpec],
        *,
        recipe: Recipe,
        protocol: Protocol | None = None,
        mode: str = "throughput",
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
        self.deadline_seconds = deadline_seconds
        self.time_limit_seconds = time_limit_seconds
        self.cpus = cpus
        self.grace_seconds = grace_seconds
        self.term_grace_seconds = term_grace_seconds
        self.tmp_root = tmp_root or os.environ.get("TMPDIR") or "/tmp"
        self.state = _State()
        self.started = time.monotonic()
        self.started_at = _now()

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
            finished_at=_now(),
            exit_code=exit_code_for(_kind(outcome)),
        )

    def _write(self, path: Path, outcome: Outcome, started_at: str) -> None:
        write_atomic(path, self._record(outcome, started_at))
        _log(f"wrote {_kind(outcome)} result to {path}: {outcome.message}")

    # --------------------------------------------------------------- processes

    def environment(self, cache_root: Path) -> dict[str, str]:
        env = dict(os.environ)
        for name in THREAD_VARIABLES:
            env[name] = str(self.cpus)
        for name, sub in (
            ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
            ("TRITON_CACHE_DIR", "triton"),
            ("CUDA_CACHE_PATH", "cuda"),
        ):
            path = cache_root / sub
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        env.setdefault("PYTHONUNBUFFERED", "1")
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
        _kill_group(proc.pid)  # leftover members of the group (the worker's own children) go too

    def _on_signal(self, signum: int, _frame) -> None:
        if self.state.stop_signal is None:
            self.state.stop_signal = signum

    def _stop_outcome(self, signum: int) -> Outcome:
        elapsed = time.monotonic() - self.started
        name = _signal_name(signum)
        # Slurm's time-limit SIGTERM comes at or after the limit; allow for the watchdog
        # starting a little after the job, but never take an early scancel for a time-out
        # (a minute of slack would cover the whole of a short job's limit).
        slack = min(60.0, 0.1 * self.time_limit_seconds) if self.time_limit_seconds is not None else 0.0
        if self.time_limit_seconds is not None and elapsed >= self.time_limit_seconds - slack:
            return Timeout(
                phase="allocation",
                deadline_seconds=self.time_limit_seconds,
                message=f"{name} after {elapsed:.0f} s: the job's time limit of {self.time_limit_seconds:.0f} s ended it",
            )
        return Cancelled(phase="allocation", message=f"{name} after {elapsed:.0f} s: the job was cancelled")

    def run_one(self, spec: WorkerSpec, env: dict[str, str]) -> tuple[WorkerResult | None, Outcome | None]:
        """Run one worker: (its own result, None) or (None, the outcome to record)."""
        before = _snapshot(spec.result)
        started_at = _now()
        if self.state.stop_signal is not None:
            return None, self._stop_outcome(self.state.stop_signal)
        if self._remaining() <= 0:
            return None, Timeout(phase=spec.label or "worker", deadline_seconds=self.deadline_seconds,
                                 message="the watchdog deadline passed before this worker could start")
        _log(f"starting {spec.label or 'worker'}: {' '.join(spec.argv)}")
        try:
            proc = subprocess.Popen(spec.argv, env=env, stdin=subprocess.DEVNULL, process_group=0)
        except OSError as exc:
            return None, Crashed(phase=spec.label or "worker", message=f"cannot start worker: {exc}")
        stop: Outcome | None = None
        while True:
            if self.state.stop_signal is not None:
                _log(f"got {_signal_name(self.state.stop_signal)}: forwarding to the worker")
                self._stop(proc, self.state.stop_signal, self.term_grace_seconds)
                stop = self._stop_outcome(self.state.stop_signal)
                break
            remaining = self._remaining()
            if remaining <= 0:
                _log(f"deadline of {self.deadline_seconds:.0f} s reached: stopping the worker")
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
        _kill_group(proc.pid)  # the group may hold children of a worker that already exited
        if stop is None and proc.returncode in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP):
            # Slurm signals every process of the job at once: ours may still be in flight.
            end = time.monotonic() + 1.0
            while self.state.stop_signal is None and time.monotonic() < end:
                time.sleep(0.05)
        if stop is None and self.state.stop_signal is not None:
            stop = self._stop_outcome(self.state.stop_signal)
        own = _written_result(spec.result, before)
        if own is not None:
            return own, None
        if stop is not None:
            return None, stop
        _log(f"worker ended with status {proc.returncode} and no result")
        return None, outcome_for_exit(proc.returncode)

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        cache_root = Path(tempfile.mkdtemp(prefix="throughput-job-", dir=self.tmp_root))
        final_kind = "ok"
        try:
            env = self.environment(cache_root)
            last = self.workers[-1]
            for index, spec in enumerate(self.workers):
                started_at = _now()
                own, outcome = self.run_one(spec, env)
                if own is not None:
                    kind = _kind(own.outcome)
                    if kind in ("ok", "capped"):
                        final_kind = kind
                        continue
                    outcome = own.outcome
                else:
                    assert outcome is not None
                    self._write(spec.result, outcome, started_at)
                final_kind = _kind(outcome)
                if spec is not last:
                    label = spec.label or f"worker {index + 1}"
                    carried = msgspec.structs.replace(outcome, message=f"{label} worker: {outcome.message}")
                    if _snapshot(last.result) is None:
                        self._write(last.result, carried, started_at)
                break
        finally:
            shutil.rmtree(cache_root, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        code = exit_code_for(final_kind)
        _log(f"done: {final_kind} (exit {code})")
        return code


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a worker's process group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kind(outcome: Outcome) -> str:
    return type(outcome).__struct_config__.tag


def _parse(argv: list[str] | None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(prog="python -m throughput_sweep.node.watchdog", description=__doc__.splitlines()[0])
    p.add_argument("--recipe", required=True, help="the point's recipe (Recipe JSON)")
    p.add_argument("--context-length", type=int, help="apply this context to the recipe")
    p.add_argument("--batch-size", type=int, help="apply this batch to the recipe")
    p.add_argument("--mode", default="throughput", choices=("throughput", "optimizer-timing"))
    p.add_argument("--manifest", help="the campaign's manifest.json (its protocol goes into failure records)")
    p.add_argument("--worker", action="append", default=[], help='JSON {"argv": [...], "result": PATH, "label": ...}')
    p.add_argument("--result", help="result path of the single worker given after --")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--deadline-minutes", type=float, default=13.0)
    g.add_argument("--deadline-seconds", type=float)
    p.add_argument("--time-limit-minutes", type=float, help="the job's time limit (tells timeout from cancel)")
    p.add_argument("--cpus", type=int, default=8)
    p.add_argument("--grace-seconds", type=float, default=10.0)
    p.add_argument("--term-grace-seconds", type=float, default=2.0)
    p.add_argument("--tmpdir", help="node-local temporary space (default $TMPDIR or /tmp)")
    args = p.parse_args(argv)
    workers = []
    for raw in args.worker:
        try:
            obj = json.loads(raw)
            workers.append(WorkerSpec(argv=[str(a) for a in obj["argv"]], result=Path(obj["result"]),
                                      label=str(obj.get("label", ""))))
        except (ValueError, KeyError, TypeError) as exc:
            p.error(f"--worker {raw!r}: {exc}")
    if tail:
        if not args.result:
            p.error("a worker after -- needs --result PATH")
        workers.append(WorkerSpec(argv=tail, result=Path(args.result)))
    if not workers:
        p.error("give --worker JSON or --result PATH -- WORKER ARGV")
    if any(not w.argv for w in workers):
        p.error("a worker needs a command")
    if (args.context_length is None) != (args.batch_size is None):
        p.error("--context-length and --batch-size go together")
    args.workers = workers
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        recipe = read(args.recipe, Recipe)
        if args.context_length is not None:
            recipe = with_point(recipe, context_length=args.context_length, batch_size=args.batch_size)
        protocol = read(args.manifest, Manifest).protocol if args.manifest else None
    except (SchemaError, ValueError) as exc:
        print(f"watchdog: {exc}", file=sys.stderr)
        return EXIT_CODES["usage"]
    deadline = args.deadline_seconds if args.deadline_seconds is not None else args.deadline_minutes * 60
    watchdog = Watchdog(
        args.workers,
        recipe=recipe,
        protocol=protocol,
        mode=args.mode,
        deadline_seconds=deadline,
        time_limit_seconds=args.time_limit_minutes * 60 if args.time_limit_minutes else None,
        cpus=args.cpus,
        grace_seconds=args.grace_seconds,
        term_grace_seconds=args.term_grace_seconds,
        tmp_root=args.tmpdir,
    )
    return watchdog.run()


if __name__ == "__main__":
    sys.exit(main())
