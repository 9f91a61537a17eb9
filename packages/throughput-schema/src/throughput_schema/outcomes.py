"""How a point ended: a tagged union, so a decoder picks the type from `kind`.

Only `cuda_oom` may establish a curve's memory boundary; every other failure
blocks the curve (`refused`: a job that could never start, cancelled by the controller). `capped` is not a failure: the quick-start curve reached its
`--max-batch` cap without an OOM.
"""

from __future__ import annotations

import msgspec

# The phase of an outcome the controller wrote from the scheduler's word (the job left no result
# of its own), whatever the scheduler: the audit tells those results apart by it.
SCHEDULER_PHASE = "scheduler"


class _Outcome(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    phase: str = ""
    message: str = ""


class Ok(_Outcome, frozen=True, tag="ok"):
    pass


class CudaOom(_Outcome, frozen=True, tag="cuda_oom"):
    """The CUDA allocator refused memory (setup, compile, capture or measurement)."""


class Timeout(_Outcome, frozen=True, tag="timeout"):
    deadline_seconds: float = 0.0
    # Slurm ended the job well before its time limit (an allocation budget used up, a limit
    # the controller enforces): `message` says what Slurm said. Not the point's doing.
    ended_early: bool = False


class HostOom(_Outcome, frozen=True, tag="host_oom"):
    pass


class CompileError(_Outcome, frozen=True, tag="compile_error"):
    pass


class NonFinite(_Outcome, frozen=True, tag="nonfinite"):
    window: int | None = None


class Crashed(_Outcome, frozen=True, tag="crashed"):
    exit_code: int | None = None


class Cancelled(_Outcome, frozen=True, tag="cancelled"):
    pass


class NodeFail(_Outcome, frozen=True, tag="node_fail"):
    pass


class Refused(_Outcome, frozen=True, tag="refused"):
    """The scheduler accepted the job, but it pended for a reason that waiting cannot clear
    (PartitionTimeLimit, InvalidQOS...): the controller cancelled it before it started. Or
    the worker found its node unable to run the recipe (phase "setup": an FP8 precision
    without torchao or FP8 matrix units), and measured nothing.
    `message` says what happened, `reason` is the scheduler's word, `fix` what to change."""

    reason: str = ""
    fix: str = ""


class StorageFull(_Outcome, frozen=True, tag="storage_full"):
    """The point's result could not be written: the campaign's filesystem was full or over
    its quota. Says nothing of the point itself (never a memory boundary); measure it again
    once there is space."""


class Capped(_Outcome, frozen=True, tag="capped"):
    max_batch: int = 0


Outcome = (
    Ok
    | CudaOom
    | Timeout
    | HostOom
    | CompileError
    | NonFinite
    | Crashed
    | Cancelled
    | NodeFail
    | Refused
    | StorageFull
    | Capped
)


def time_limit_slack(limit_seconds: float) -> float:
    """How far before its time limit a job may be stopped and still count as timed out: the
    watchdog starts a little after the job; never a minute of a short job's whole limit."""
    return min(60.0, 0.1 * limit_seconds)


def written_by_scheduler(outcome: Outcome) -> bool:
    """The controller wrote this outcome from the scheduler's word: the job left no result."""
    return outcome.phase == SCHEDULER_PHASE


def outcome_kind(outcome: Outcome | type[_Outcome]) -> str:
    """The `kind` an outcome is written with ("ok", "cuda_oom", ...)."""
    tag = outcome.__struct_config__.tag
    assert isinstance(tag, str), "every outcome class names its kind with a string tag"
    return tag


OUTCOME_KINDS: tuple[str, ...] = tuple(outcome_kind(t) for t in Outcome.__args__)

# The worker's exit status for each outcome it can detect itself. The watchdog
# maps a signal death (SIGKILL from the kernel's OOM killer) to host_oom and its
# own deadline to timeout; Slurm's states cover cancelled and node_fail.
EXIT_CODES: dict[str, int] = {
    "ok": 0,
    "crashed": 1,
    "usage": 2,
    "cuda_oom": 3,
    "compile_error": 4,
    "nonfinite": 5,
    "timeout": 6,
    "host_oom": 7,
    "cancelled": 8,
    "node_fail": 9,
    # The worker or its watchdog could not write the result (the job log may not take a
    # line either): the exit status is what the scheduler's accounting still shows.
    "storage_full": 10,
    # The worker could not run what was asked on this node (an FP8 precision without torchao
    # or without FP8 matrix units): a `refused` outcome naming the cause and the fix.
    "refused": 11,
}
