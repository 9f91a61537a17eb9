"""Independent checks of every figure the report uses, re-derived from raw records.

Nothing here imports the controller's or the audit's arithmetic: window rates come
from each window's update count and seconds, medians and CVs from those rates, a
window's optimizer milliseconds from the raw burst samples weighted by each burst's
update count, a window's energy from its counter readings (the schema's `derive_window`), and parameter counts from the decoder's weight tensors (`architecture`,
the schema's one table; the worker and the audit witness that table independently). The first check that fails stops
the report with a one-line message naming the file.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from throughput_report.architecture import count_parameters
from throughput_report.inputs import ReportAttempt
from throughput_report.pairing import Pair
from throughput_schema import outcome_kind
from throughput_schema.energy import derive_window
from throughput_schema.layout import BASELINE, RESULT
from throughput_schema.records import Manifest, Protocol, Throughput, WorkerResult

# Floats travel through JSON exactly; this only absorbs a different summation order.
REL_TOL = 1e-6


class CheckFailed(Exception):
    """A recorded figure disagrees with its re-derivation; the message names the file."""


@dataclass
class Tally:
    """How many of each check passed: the methods page prints these."""

    counts: Counter = field(default_factory=Counter)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _kind(result: WorkerResult) -> str:
    return outcome_kind(result.outcome)


def window_rates(result: WorkerResult, batch: int, context: int) -> list[float]:
    """Tokens per second of every window: updates x batch x context / seconds."""
    return [w.updates * batch * context / w.seconds for w in result.windows]


def cv(values: list[float]) -> float:
    """Sample coefficient of variation: stdev with n-1 over the mean."""
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def weighted_window_ms(result: WorkerResult, bursts, attr: str) -> list[float]:
    """Each window's milliseconds from its bursts, weighted by each burst's update count."""
    totals: dict[int, float] = {}
    updates: dict[int, int] = {}
    for burst in bursts:
        totals[burst.window] = totals.get(burst.window, 0.0) + burst.updates * getattr(burst, attr)
        updates[burst.window] = updates.get(burst.window, 0) + burst.updates
    return [totals[w] / updates[w] for w in range(len(result.windows))]


def check_result(
    result: WorkerResult, attempt: ReportAttempt, manifest: Manifest, tally: Tally, *, file: str = RESULT
) -> None:
    """Timing arithmetic, update counts, recipe and parameter count of one fitting result."""
    where = f"{attempt.path / file}"
    batch, context = attempt.batch, attempt.context

    def fail(message: str) -> NoReturn:
        raise CheckFailed(f"check failed: {where}: {message}")

    if _kind(result) != "ok":
        fail(f"outcome is {_kind(result)}, expected ok")
    _check_recipe(result, batch, context, fail, tally)

    protocol = manifest.protocol
    if result.protocol != protocol:
        fail("protocol differs from the campaign manifest's")
    tp = result.throughput
    if tp is None or not result.windows:
        fail("fits but records no throughput windows")
    n = len(result.windows)
    first = window_rates(result, batch, context)
    if n not in (protocol.windows, protocol.windows + protocol.extra_windows):
        fail(f"{n} windows; the protocol measures {protocol.windows} or {protocol.windows + protocol.extra_windows}")
    _check_update_counts(result, protocol, fail, tally)
    _check_rates(result, tp, first, protocol, (batch, context), fail, tally)
    if result.energy is not None:
        check_energy(result, batch * context, fail, tally)
    _check_memory(result, fail, tally)


def _check_recipe(
    result: WorkerResult, batch: int, context: int, fail: Callable[[str], NoReturn], tally: Tally
) -> None:
    """The recipe names the folder's point and its parameter count is the decoder's."""
    recipe = result.recipe
    if (recipe.model.context_length, recipe.training.micro_batch_size) != (context, batch):
        fail(
            f"recipe is context {recipe.model.context_length}, batch {recipe.training.micro_batch_size}; "
            f"the folder says context {context}, batch {batch}"
        )
    if recipe.training.batch_tokens != batch * context:
        fail(f"recipe batch_tokens {recipe.training.batch_tokens} != {batch} x {context}")
    tally.add("recipes match their points")
    expected_params = count_parameters(recipe.model)
    if result.parameters != expected_params:
        fail(f"parameters {result.parameters:,} but the recipe has {expected_params:,}")
    tally.add("parameter counts")


def _check_update_counts(
    result: WorkerResult, protocol: Protocol, fail: Callable[[str], NoReturn], tally: Tally
) -> None:
    """Every window ran the calibrated count, and the optimizer's counter after window i is
    exactly setup + warm-up + calibration + (i+1)·N."""
    # Without a calibration record, N is the first window's count and calibration ran the protocol's.
    calibration = result.calibration
    if calibration is not None and calibration.updates != protocol.calibration_updates:
        fail(f"calibration ran {calibration.updates} updates, the protocol says {protocol.calibration_updates}")
    per_window = calibration.updates_per_window if calibration else result.windows[0].updates
    calibration_updates = calibration.updates if calibration else protocol.calibration_updates
    start = result.setup_updates + protocol.warmup + calibration_updates
    for i, w in enumerate(result.windows):
        if w.updates != per_window:
            fail(f"window {i} ran {w.updates} updates, calibration chose {per_window}")
        if w.updates < protocol.min_updates_per_window:
            fail(f"window {i} ran {w.updates} updates, fewer than {protocol.min_updates_per_window}")
        if w.counter_after != start + (i + 1) * per_window:
            fail(
                f"optimizer counter after window {i} is {w.counter_after}, expected "
                f"{result.setup_updates} setup + {protocol.warmup} warm-up + {calibration_updates} calibration "
                f"+ {i + 1}×{per_window} = {start + (i + 1) * per_window}"
            )
    tally.add("update counts", len(result.windows))


def _check_rates(
    result: WorkerResult,
    tp: Throughput,
    first: list[float],
    protocol: Protocol,
    point: tuple[int, int],
    fail: Callable[[str], NoReturn],
    tally: Tally,
) -> None:
    """Window rates, their median and CV, and the stability flags, from each window's updates and seconds."""
    batch, context = point
    n = len(result.windows)
    if len(tp.window_tokens_per_second) != n:
        fail(f"{len(tp.window_tokens_per_second)} recorded window rates for {n} windows")
    for i, (mine, theirs) in enumerate(zip(first, tp.window_tokens_per_second)):
        if not _close(mine, theirs):
            fail(f"window {i} rate {theirs:.6g} tokens/s, but its updates and seconds give {mine:.6g}")
    tally.add("window rates", n)
    median = statistics.median(first)
    if not _close(median, tp.tokens_per_second):
        fail(f"throughput {tp.tokens_per_second:.6g} tokens/s is not the median window rate {median:.6g}")
    if not _close(tp.sequences_per_second * context, tp.tokens_per_second):
        fail("sequences/s x context != tokens/s")
    tally.add("medians")
    mine_cv = cv(first)
    if not _close(mine_cv, tp.cv, 1e-4) and abs(mine_cv - tp.cv) > 1e-9:
        fail(f"CV {tp.cv:.6g} recorded, {mine_cv:.6g} from the window rates")
    if n > protocol.windows:
        head = cv(first[: protocol.windows])
        opt_head = 0.0
        if result.optimizer_timing is not None:
            opt_head = cv(result.optimizer_timing.window_optimizer_ms[: protocol.windows])
        if head <= protocol.cv_threshold and opt_head <= protocol.cv_threshold:
            fail(f"extra windows measured although the first {protocol.windows} had CV {head:.4f}")
    if tp.unstable != (mine_cv > protocol.cv_threshold):
        fail(f"unstable={tp.unstable}, but CV {mine_cv:.4f} vs threshold {protocol.cv_threshold}")
    if not _close(tp.update_ms, 1000.0 * batch * context / median):
        fail(f"update_ms {tp.update_ms:.6g}, but the median rate gives {1000.0 * batch * context / median:.6g}")
    tally.add("CV and stability flags")


def _check_memory(result: WorkerResult, fail: Callable[[str], NoReturn], tally: Tally) -> None:
    """A GPU point records its setup and measurement peaks, each with reserved at least allocated."""
    if result.memory is None and not result.hardware.gpu_name and not result.hardware.gpu_count:
        return  # a point measured on the CPU has no GPU memory to record
    if result.memory is None or result.memory.measurement is None:
        fail("fits but records no measurement memory peaks")
    for phase in (result.memory.setup, result.memory.measurement):
        if phase.reserved_bytes < phase.allocated_bytes:
            fail("reserved memory peak below the allocated peak")
    tally.add("memory peaks")


def check_energy(result: WorkerResult, tokens: int, fail: Callable[[str], NoReturn], tally: Tally) -> None:
    """Each window's derived energy figures against its counter readings (`derive_window`, the
    schema's one home), and the result's joules per token against the median window's."""
    assert result.energy is not None, "checked where the result records energy"
    for i, w in enumerate(result.windows):
        if w.energy is None:
            fail(f"records energy, but window {i} has no counter readings")
        e = w.energy
        mine = derive_window(e.start_mj, e.end_mj, e.interval_seconds, w.updates * tokens)
        for name in ("joules", "mean_watts", "joules_per_token"):
            if not _close(getattr(mine, name), getattr(e, name)):
                fail(
                    f"window {i} {name} {getattr(e, name):.6g}, but its counter readings "
                    f"({e.start_mj} to {e.end_mj} mJ over {e.interval_seconds:.6g} s) give {getattr(mine, name):.6g}"
                )
    tally.add("energy windows", len(result.windows))
    median = statistics.median(w.energy.joules_per_token for w in result.windows if w.energy is not None)
    if not _close(median, result.energy.joules_per_token):
        fail(f"joules per token {result.energy.joules_per_token:.6g} is not the median window's {median:.6g}")
    tally.add("energy medians")


def check_optimizer_timing(result: WorkerResult, attempt: ReportAttempt, tally: Tally) -> None:
    """Event weighting: window optimizer ms from the raw bursts, weighted by update count."""
    where = f"{attempt.path / RESULT}"

    def fail(message: str) -> NoReturn:
        raise CheckFailed(f"check failed: {where}: {message}")

    timing = result.optimizer_timing
    if timing is None:
        fail("an instrumented result without optimizer timing")
    bursts = attempt.bursts if attempt.bursts is not None else timing.bursts
    if attempt.bursts is not None and attempt.bursts != timing.bursts:
        fail("bursts.jsonl differs from the bursts recorded in result.json")
    n = len(result.windows)
    _check_burst_updates(result, bursts, fail, tally)
    for attr, recorded in (("optimizer_ms", timing.window_optimizer_ms), ("graph_ms", timing.window_graph_ms)):
        mine = weighted_window_ms(result, bursts, attr)
        if len(recorded) != n:
            fail(f"{len(recorded)} window {attr} values for {n} windows")
        for i, (a, b) in enumerate(zip(mine, recorded)):
            if not _close(a, b):
                fail(f"window {i} {attr} {b:.6g}, but its bursts weighted by updates give {a:.6g}")
    tally.add("event-weighted windows", 2 * n)
    median = statistics.median(timing.window_optimizer_ms)
    if not _close(median, timing.optimizer_ms):
        fail(f"optimizer_ms {timing.optimizer_ms:.6g} is not the median window value {median:.6g}")
    mine_cv = cv(timing.window_optimizer_ms)
    if not _close(mine_cv, timing.optimizer_cv, 1e-4) and abs(mine_cv - timing.optimizer_cv) > 1e-9:
        fail(f"optimizer CV {timing.optimizer_cv:.6g} recorded, {mine_cv:.6g} from the windows")
    if mine_cv > result.protocol.cv_threshold and not timing.unstable:
        fail(f"optimizer CV {mine_cv:.4f} exceeds the threshold but the point is not flagged unstable")
    # Shares as the worker defines them: over the median graph ms and the median
    # instrumented wall ms per update (1000·seconds/updates of each window), capped at 1.
    graph = statistics.median(timing.window_graph_ms)
    share = min(1.0, timing.optimizer_ms / graph) if graph > 0 else 0.0
    if graph > 0 and not _close(timing.share_of_graph, share):
        fail(f"share_of_graph {timing.share_of_graph:.6g}, but optimizer / graph ms give {share:.6g}")
    wall = statistics.median(1000.0 * w.seconds / w.updates for w in result.windows)
    share = min(1.0, timing.optimizer_ms / wall)
    if not _close(timing.share_of_wall, share):
        fail(f"share_of_wall {timing.share_of_wall:.6g}, but optimizer ms / wall ms per update give {share:.6g}")
    tally.add("optimizer medians and shares")


def _check_burst_updates(result: WorkerResult, bursts, fail: Callable[[str], NoReturn], tally: Tally) -> None:
    """The bursts cover every window, and each window's bursts add up to its update count."""
    n = len(result.windows)
    windows_seen = {b.window for b in bursts}
    if windows_seen != set(range(n)):
        fail(f"burst samples cover windows {sorted(windows_seen)}, expected 0..{n - 1}")
    for i, w in enumerate(result.windows):
        burst_updates = sum(b.updates for b in bursts if b.window == i)
        if burst_updates != w.updates:
            fail(f"window {i} bursts total {burst_updates} updates, the window ran {w.updates}")
    tally.add("burst update counts", n)


def check_pair(pair: Pair, tally: Tally) -> None:
    """Every check on one campaign pair; raises CheckFailed on the first disagreement."""
    tm, om = pair.throughput.manifest, pair.optimizer.manifest
    if tm.protocol != om.protocol:
        raise CheckFailed(
            f"check failed: {pair.optimizer.name} measured with a different protocol than {pair.throughput.name}"
        )
    tally.add("matching configurations")
    for name, curve in pair.curves.items():
        # Original memory boundaries: 1, 2, 4, ... then a confirmed CUDA OOM at twice the largest.
        expected = [2**i for i in range(len(curve.fitting))]
        if curve.fitting != expected:
            raise CheckFailed(
                f"check failed: {pair.throughput.name}: curve {name} fits batches {curve.fitting}, "
                f"not the contiguous doublings {expected}"
            )
        if curve.first_oom is not None:
            largest = curve.largest_fitting or 0
            if curve.first_oom != max(1, 2 * largest):
                raise CheckFailed(
                    f"check failed: {pair.throughput.name}: curve {name} first OOM b{curve.first_oom} is not "
                    f"twice the largest fitting batch b{largest}"
                )
            oom = curve.finals[curve.first_oom]
            if _kind(oom.measured) != "cuda_oom":
                raise CheckFailed(f"check failed: {oom.path / RESULT}: boundary set by {_kind(oom.measured)}")
            if max(curve.finals) != curve.first_oom:
                raise CheckFailed(
                    f"check failed: {pair.throughput.name}: curve {name} has results beyond its first OOM"
                )
        if curve.closed is not None and max(curve.finals) != max(1, 2 * (curve.largest_fitting or 0)):
            raise CheckFailed(
                f"check failed: {pair.throughput.name}: curve {name} is closed at b{max(curve.finals)}, "
                f"not at the batch after its largest fitting b{curve.largest_fitting}"
            )
        tally.add("memory boundaries")
        for batch in curve.fitting:
            attempt = curve.finals[batch]
            check_result(attempt.measured, attempt, tm, tally)
            if attempt.measured.optimizer_timing is not None:
                raise CheckFailed(f"check failed: {attempt.path / RESULT}: a throughput point with optimizer timing")
            point = pair.points[name][batch].attempt
            check_result(point.measured_baseline, point, om, tally, file=BASELINE)
            if point.measured_baseline.optimizer_timing is not None:
                raise CheckFailed(f"check failed: {point.path / BASELINE}: the baseline is instrumented")
            check_result(point.measured, point, om, tally)
            check_optimizer_timing(point.measured, point, tally)
            if not (attempt.measured.recipe == point.measured_baseline.recipe == point.measured.recipe):
                raise CheckFailed(
                    f"check failed: {name} b{batch}: recipes differ between {attempt.path / RESULT}, "
                    f"{point.path / BASELINE} and {point.path / RESULT}"
                )
            tally.add("matching configurations")


def run_checks(pairs: list[Pair]) -> Tally:
    tally = Tally()
    for pair in pairs:
        check_pair(pair, tally)
    return tally
