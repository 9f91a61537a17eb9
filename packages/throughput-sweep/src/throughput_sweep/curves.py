"""The curve state machine: pure functions from a campaign's attempt files to curve states.

A curve is one (model, context). Throughput campaigns double the batch 1, 2, 4, ...
one point at a time; only a confirmed `cuda_oom` sets the memory boundary, any other
failure blocks the curve, and a `--max-batch` cap ends it as "no OOM up to the cap".
Optimizer-timing campaigns and spot checks walk the parent's (sampled) fitting batches: sequentially, or every
point at once (`parallel`), where a failure pauses only its own curve. An OOM there was
not expected (the parent fitted that batch) and blocks.

Nothing here reads files or talks to a scheduler, so every rule is unit-tested alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from throughput_schema import CurveClosure, CurveSummary, FailedAttempt, Manifest
from throughput_schema.campaigns import CURVE_ENDED, CurveState
from throughput_schema.layout import counting_attempts, curve_name
from throughput_sweep.attempt_status import AttemptInfo


@dataclass(frozen=True)
class NextPoint:
    model: str
    context_length: int
    batch_size: int
    attempt: int

    @property
    def curve(self) -> str:
        return curve_name(self.model, self.context_length)


@dataclass
class Curve:
    model: str
    context_length: int
    state: CurveState = "pending"
    blocked_reason: str = ""
    next: list[NextPoint] = field(default_factory=list)
    fitting: list[int] = field(default_factory=list)
    first_oom: int | None = None
    unstable: list[int] = field(default_factory=list)
    running: list[AttemptInfo] = field(default_factory=list)
    failed: list[AttemptInfo] = field(default_factory=list)
    points: dict[int, AttemptInfo] = field(default_factory=dict)  # batch -> latest attempt that counts
    attempts: list[AttemptInfo] = field(default_factory=list)
    planned: list[int] | None = None  # optimizer campaigns: the inherited grid
    cap: int | None = None
    closure: CurveClosure | None = None  # state "closed": a person ended it (close-curve)

    @property
    def name(self) -> str:
        return curve_name(self.model, self.context_length)

    @property
    def done(self) -> bool:
        return self.state in CURVE_ENDED and not self.running

    @property
    def fastest_stable(self) -> tuple[int, float] | None:
        best = None
        for b in self.fitting:
            info = self.points[b]
            rate = info.tokens_per_second
            if rate is None or info.unstable:
                continue
            if best is None or rate > best[1]:
                best = (b, rate)
        return best

    @property
    def most_efficient(self) -> tuple[int, float] | None:
        """The stable batch of the lowest median joules per token (the smaller on a tie)."""
        best = None
        for b in self.fitting:
            info = self.points[b]
            joules = info.joules_per_token
            if joules is None or joules <= 0 or info.unstable:  # no counter, or one the audit refuses
                continue
            if best is None or joules < best[1]:
                best = (b, joules)
        return best

    @property
    def largest_fitting(self) -> int | None:
        return max(self.fitting) if self.fitting else None

    @property
    def describe(self) -> str:
        if self.state == "bounded":
            return f"bounded: fits {self.largest_fitting}, CUDA OOM at {self.first_oom}"
        if self.state == "capped":
            return f"no OOM up to the cap ({self.cap}); largest fitting {self.largest_fitting}"
        if self.state == "blocked":
            return f"blocked: {self.blocked_reason}"
        if self.state == "closed":
            assert self.closure is not None, "a curve is closed together with its closure"
            return f"closed by hand at batch {self.closure.batch_size}: {self.closure.reason}"
        if self.state == "complete":
            return f"complete: {len(self.fitting)} points, largest {self.largest_fitting}"
        if self.state == "running":
            return "running batch " + ", ".join(str(r.batch) for r in self.running)
        return "pending: next batch " + ", ".join(str(n.batch_size) for n in self.next)

    def summary(self) -> CurveSummary:
        fastest = self.fastest_stable
        efficient = self.most_efficient
        return CurveSummary(
            curve=self.name,
            model=self.model,
            context_length=self.context_length,
            state=self.state,
            fitting_batches=list(self.fitting),
            fastest_stable_batch=fastest[0] if fastest else None,
            fastest_tokens_per_second=fastest[1] if fastest else None,
            largest_fitting_batch=self.largest_fitting,
            first_oom_batch=self.first_oom,
            unstable_batches=list(self.unstable),
            blocked_reason=self.blocked_reason,
            closure=self.closure,
            most_efficient_batch=efficient[0] if efficient else None,
            most_efficient_joules_per_token=efficient[1] if efficient else None,
            failed_attempts=[
                FailedAttempt(
                    batch_size=f.batch, attempt=f.number, job_id=f.job_id, outcome=f.outcome, message=f.message
                )
                for f in self.failed
            ],
        )


def campaign_done(curves: list[Curve]) -> bool:
    return all(c.done for c in curves)


def is_complete(curves: list[Curve]) -> bool:
    """Every curve ended with a result: bounded, capped or complete (none blocked, none running),
    and every job that ran has its receipt."""
    return all(c.done and c.state != "blocked" for c in curves) and not unreceipted(curves)


def unreceipted(curves: list[Curve]) -> list[AttemptInfo]:
    """Attempts whose job ran (a result) with no receipt naming it: its accounting, and the
    audit's checks of the job, are missing until a lookup by its token or `reconcile` adopts it."""
    return [i for c in curves for i in c.attempts if i.ran_without_receipt]


def retry_set(curves: list[Curve]) -> frozenset[Path]:
    """Failed attempts that are the latest at their point: `--retry-failed` retries these."""
    paths = set()
    for curve in curves:
        if curve.state == "closed":
            continue  # a person ended it: --retry-failed leaves it closed
        for info in curve.failed:
            if curve.points.get(info.batch) is info and info.status != "ambiguous":
                paths.add(info.attempt.path)
    return frozenset(paths)


DOUBLING_LIMIT = 1 << 20  # no single GPU fits a million sequences: a curve this long is broken


def doubling(limit: int = DOUBLING_LIMIT) -> Iterable[int]:
    b = 1
    while b <= limit:
        yield b
        b *= 2


def derive(
    manifest: Manifest,
    infos: list[AttemptInfo],
    retry: frozenset[Path] = frozenset(),
    closures: dict[str, CurveClosure] | None = None,
) -> list[Curve]:
    """Every curve of the campaign, in manifest order (models outer, contexts inner).

    `retry` holds the paths of failed attempts that may be retried now
    (`--retry-failed`): the point gets a fresh attempt instead of blocking. `closures`
    (by curve name) end blocked curves by a person's decision: a closure counts only
    while it names the curve's last failed attempt, and a closed curve is not retried.
    """
    closures = closures or {}
    by_curve: dict[str, list[AttemptInfo]] = {}
    for info in infos:
        by_curve.setdefault(info.attempt.curve, []).append(info)
    curves = []
    for model in manifest.models:
        for context in manifest.contexts:
            name = curve_name(model, context)
            curve = Curve(model=model, context_length=context, cap=manifest.max_batch)
            curve.attempts = sorted(by_curve.get(name, []), key=lambda i: (i.batch, i.number))
            _index(curve)
            closure = closures.get(name)
            closing = closure is not None and closes(closure, curve)
            if closing:
                retry = retry - {info.attempt.path for info in curve.failed}
            if manifest.kind == "throughput" and manifest.spot_check is None:
                _sequential(curve, doubling(), oom_is_boundary=True, retry=retry)
            else:
                curve.planned = list(manifest.inherited_batches.get(name, []))
                if manifest.parallel_points:
                    _parallel(curve, retry)
                else:
                    _sequential(curve, iter(curve.planned), oom_is_boundary=False, retry=retry)
            if closing and curve.state == "blocked" and not curve.running:
                curve.state, curve.closure = "closed", closure
            curves.append(curve)
    return curves


def last_failure(curve: Curve) -> AttemptInfo | None:
    """The curve's latest failed attempt (by batch, then attempt): what a closure names."""
    return max(curve.failed, key=lambda i: (i.batch, i.number), default=None)


def closes(closure: CurveClosure, curve: Curve) -> bool:
    last = last_failure(curve)
    return last is not None and (closure.batch_size, closure.attempt) == (last.batch, last.number)


def _index(curve: Curve) -> None:
    """The attempt that counts per batch (the schema's rule); failures and runs."""
    for info in curve.attempts:
        status = info.status
        if status in ("failed", "refused", "ambiguous") or (status == "oom" and info.optimizer):
            curve.failed.append(info)
        if status in ("submitted", "unsettled"):
            curve.running.append(info)
    curve.points = counting_attempts(
        curve.attempts, point=lambda i: i.batch, number=lambda i: i.number, void=lambda i: i.status == "abandoned"
    )


def _next_attempt(curve: Curve, batch: int) -> NextPoint:
    numbers = [i.number for i in curve.attempts if i.batch == batch]
    return NextPoint(curve.model, curve.context_length, batch, max(numbers, default=0) + 1)


def _record_ok(curve: Curve, info: AttemptInfo) -> None:
    curve.fitting.append(info.batch)
    if info.unstable:
        curve.unstable.append(info.batch)


def _blocked_reason(info: AttemptInfo, *, unexpected_oom: bool = False) -> str:
    status = info.status
    where = f"batch {info.batch} attempt {info.number}"
    if status == "ambiguous":
        return (
            f"{where}: ambiguous submission ({info.message}); settle it with "
            f"`throughput-sweep reconcile --token {info.attempt.token} --job-id ID|--none`"
        )
    if status == "refused":
        return f"{where}: the scheduler refused the job: {info.message}"
    if unexpected_oom:
        return f"{where}: unexpected CUDA OOM (the parent campaign fitted this batch)"
    job = f" (job {info.job_id})" if info.job_id else ""
    detail = f": {info.message}" if info.message else ""
    return f"{where}{job}: {info.outcome}{detail}"


def _sequential(curve: Curve, batches: Iterable[int], *, oom_is_boundary: bool, retry: frozenset[Path]) -> None:
    cap = curve.cap if oom_is_boundary else None
    for b in batches:
        if cap is not None and b > cap:
            curve.state = "capped"
            return
        info = curve.points.get(b)
        if info is None:
            curve.state = "pending"
            curve.next = [_next_attempt(curve, b)]
            return
        status = info.status
        if status in ("submitted", "unsettled"):
            curve.state = "running"
            return
        if status == "ok":
            _record_ok(curve, info)
            continue
        if status == "oom" and oom_is_boundary:
            curve.first_oom = b
            curve.state = "bounded"
            return
        if status != "ambiguous" and info.attempt.path in retry:
            curve.state = "pending"
            curve.next = [_next_attempt(curve, b)]
            return
        curve.state = "blocked"
        curve.blocked_reason = _blocked_reason(info, unexpected_oom=status == "oom")
        return
    if oom_is_boundary:
        curve.state = "blocked"
        curve.blocked_reason = f"no CUDA OOM up to batch {DOUBLING_LIMIT}; the worker's memory accounting looks wrong"
        return
    curve.state = "complete"


def _parallel(curve: Curve, retry: frozenset[Path]) -> None:
    ready, retries, blocked = [], [], []
    for b in curve.planned or []:
        info = curve.points.get(b)
        if info is None:
            ready.append(_next_attempt(curve, b))
            continue
        status = info.status
        if status == "ok":
            _record_ok(curve, info)
        elif status in ("submitted", "unsettled"):
            pass
        elif status != "ambiguous" and info.attempt.path in retry:
            retries.append(_next_attempt(curve, b))
        else:
            blocked.append(info)
    retrying = [r for r in curve.running if any(i.batch == r.batch and i.number < r.number for i in curve.failed)]
    if blocked:
        # A failure pauses further submissions on this curve until it is retried successfully.
        curve.state = "blocked"
        curve.blocked_reason = "; ".join(_blocked_reason(i, unexpected_oom=i.status == "oom") for i in blocked)
    if retries:
        curve.state = "pending"
        curve.next = retries  # the failed points first; the rest waits for their success
    elif blocked:
        return
    elif retrying:
        curve.state = "running"
    elif ready:
        curve.state = "pending"
        curve.next = ready
    elif curve.running:
        curve.state = "running"
    else:
        curve.state = "complete"


def pick(curves: list[Curve], slots: int) -> list[NextPoint]:
    """Up to `slots` points to submit now, smallest batches first, curves in turn."""
    queue: list[NextPoint] = []
    for curve in curves:
        if curve.state == "pending":
            queue.extend(curve.next)
    queue.sort(key=lambda n: (n.batch_size, 0 if n.attempt > 1 else 1))
    return queue[: max(0, slots)]
