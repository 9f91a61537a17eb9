"""Where a worker's setup goes: its seconds split into phases that add up to the setup.

The worker's phase hook already says when the update's first eager call starts ("compile")
and when capture starts ("capture"); the compile part is split further with TorchDynamo's
own cumulative timers (`torch._dynamo.utils.compilation_time_metrics`, read before and
after): the trace (bytecode to FX graph) and the backend's compile (inductor: forward at the
first call, backward at the first backward). What the timers do not cover in those first
calls (the kernels' own JIT, such as FlashAttention-4's, lazy initialisation, running the
eager updates) is `first_run`. Timer names are private to torch: where one is missing its
seconds stay in `first_run`, so the phases still add up.

`startup_seconds` is the time before setup: the interpreter, the imports, the hardware
query and the energy meter, from the process's start as the kernel recorded it (Linux).
"""

from __future__ import annotations

import os
import time

from throughput_schema.results import SETUP_PHASES

# Cumulative TorchDynamo timers: a frame's whole compile (its trace and its forward graph's
# backend compile), the forward's backend compile, and the backward graph's compile, which
# runs lazily at the first backward, outside the frame's.
_DYNAMO_TOTAL = "_compile.compile_inner"
_FORWARD_BACKEND = "OutputGraph.call_user_compiler"
_BACKWARD = "backward._backward_impl"


def _dynamo_seconds() -> tuple[float, float]:
    """(trace, backend compile) seconds so far in this process."""
    try:
        from torch._dynamo.utils import compilation_time_metrics as metrics
    except ImportError:  # pragma: no cover - a torch without the timers
        return 0.0, 0.0
    total, forward = sum(metrics.get(_DYNAMO_TOTAL, ())), sum(metrics.get(_FORWARD_BACKEND, ()))
    return max(0.0, total - forward), forward + sum(metrics.get(_BACKWARD, ()))


class SetupClock:
    """Follows the worker's phase hook during setup; `phases(start, end)` splits the setup."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.dynamo: dict[str, tuple[float, float]] = {}

    def mark(self, phase: str) -> None:
        if phase in ("setup", "compile", "capture") and phase not in self.marks:
            self.marks[phase] = time.perf_counter()
            self.dynamo[phase] = _dynamo_seconds()

    def phases(self, start: float, end: float) -> dict[str, float]:
        """Seconds per phase, in order, adding up to `end - start` (perf_counter times)."""
        compile_at = self.marks.get("compile", end)
        capture_at = self.marks.get("capture", end)
        trace0, backend0 = self.dynamo.get("compile", _dynamo_seconds())
        trace1, backend1 = self.dynamo.get("capture", _dynamo_seconds())
        first = max(0.0, capture_at - compile_at)
        backend = min(first, max(0.0, backend1 - backend0))
        trace = min(first - backend, max(0.0, trace1 - trace0))
        seconds = (compile_at - start, trace, backend, first - trace - backend, max(0.0, end - capture_at))
        return dict(zip(SETUP_PHASES, seconds, strict=True))


def startup_seconds() -> float | None:
    """Seconds since this process started (Linux's /proc; None where it cannot be read)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time after boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
