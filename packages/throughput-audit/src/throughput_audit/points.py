"""Checks of one worker result against its own raw windows and its point.

Per window: rate = updates x B x L / seconds. Reported rate = median window rate.
The sample CV (n-1) of the first `protocol.windows` rates decides whether
`protocol.extra_windows` more were due; the CV of all counted windows decides the
unstable flag. Every window ran the calibrated number of updates, and the
optimizer's counter read after each window advanced by exactly that many.
"""

from __future__ import annotations

from throughput_audit.findings import Checks
from throughput_audit.roofline import check_roofline
from throughput_audit.stats import (
    GUIDE_PARAMETERS,
    first_difference,
    flops_per_token,
    lookup_parameters,
    median,
    parameters,
    sample_cv,
)
from throughput_schema import Protocol, Recipe, Throughput, WorkerResult
from throughput_schema.configs import PROTOCOL_RECIPE_FIELDS, protocol_field
from throughput_schema.knobs import knob_values
from throughput_schema.recipe import at_point

RATE_REL = 1e-9
CV_REL = 1e-6


def window_rates(result: WorkerResult, batch: int, context: int) -> list[float]:
    tokens = batch * context
    return [w.updates * tokens / w.seconds for w in result.windows]


def extension_due(cv_first: float, protocol: Protocol) -> bool:
    return cv_first > protocol.cv_threshold


def check_windows(
    checks: Checks,
    file: str,
    result: WorkerResult,
    *,
    batch: int,
    context: int,
    protocol: Protocol,
    extended_by_optimizer: bool = False,
) -> list[float] | None:
    """Window count, update counts and counters; returns the recomputed window rates."""
    if not result.windows:
        checks.fail("windows.present", file, f"{file}: an ok result without measurement windows")
        return None
    rates = window_rates(result, batch, context)
    _check_window_count(checks, file, result, rates, protocol, extended_by_optimizer)
    _check_window_updates(checks, file, result, protocol)
    _check_update_counter(checks, file, result, protocol)
    return rates


def _check_window_count(
    checks: Checks, file: str, result: WorkerResult, rates: list[float], protocol: Protocol, extended_by_optimizer: bool
) -> None:
    """The protocol's windows, plus its extra ones where the first windows' CV (or the optimizer's) called for them."""
    base, extra = protocol.windows, protocol.extra_windows
    cv_first = sample_cv(rates[:base])
    due = extension_due(cv_first, protocol) or extended_by_optimizer
    expected_n = base + extra if due else base
    why = (
        f"first {base} windows' CV {cv_first:.4%} {'>' if cv_first > protocol.cv_threshold else '<='} "
        f"{protocol.cv_threshold:.0%}" + (" and the optimizer CV exceeded it" if extended_by_optimizer else "")
    )
    checks.expect(
        "windows.count",
        len(result.windows) == expected_n,
        file,
        f"{file}: {len(result.windows)} windows, expected {expected_n} ({why})",
        windows=len(result.windows),
        expected=expected_n,
        cv_first=cv_first,
        cv_threshold=protocol.cv_threshold,
    )


def _check_window_updates(checks: Checks, file: str, result: WorkerResult, protocol: Protocol) -> None:
    """Every window ran the calibrated updates, at least the protocol's minimum, after the protocol's calibration."""
    windows = result.windows
    calib = result.calibration
    per_window = calib.updates_per_window if calib else None
    bad = [
        (i, w.updates)
        for i, w in enumerate(windows)
        if (per_window is not None and w.updates != per_window) or w.updates < protocol.min_updates_per_window
    ]
    checks.expect(
        "windows.updates",
        calib is not None and not bad,
        file,
        f"{file}: window updates {[w.updates for w in windows]} vs calibrated {per_window} "
        f"(at least {protocol.min_updates_per_window})" + ("" if calib else "; no calibration record"),
        updates=[w.updates for w in windows],
        calibrated=per_window,
        minimum=protocol.min_updates_per_window,
    )
    if calib is not None:
        checks.expect(
            "calibration.updates",
            calib.updates == protocol.calibration_updates,
            file,
            f"{file}: calibration ran {calib.updates} updates, protocol says {protocol.calibration_updates}",
            actual=calib.updates,
            expected=protocol.calibration_updates,
        )


def _check_update_counter(checks: Checks, file: str, result: WorkerResult, protocol: Protocol) -> None:
    # The counter after window i must be setup_updates (eager updates before graph
    # capture) + warm-up + calibration + the updates of windows 0..i, exactly.
    calib = result.calibration
    counters = [w.counter_after for w in result.windows]
    setup = result.setup_updates
    start = setup + protocol.warmup + (calib.updates if calib else protocol.calibration_updates)
    expected_counters = []
    running = start
    for w in result.windows:
        running += w.updates
        expected_counters.append(running)
    mismatch = [i for i, (a, e) in enumerate(zip(counters, expected_counters)) if a != e]
    checks.expect(
        "windows.update_counter",
        not mismatch,
        file,
        f"{file}: optimizer counter after windows {counters}, expected {expected_counters} "
        f"({setup} setup + {protocol.warmup} warm-up + {start - setup - protocol.warmup} calibration updates, "
        f"then each window's updates)" + (f"; first mismatch at window {mismatch[0]}" if mismatch else ""),
        actual=counters,
        expected=expected_counters,
        setup_updates=setup,
    )


def check_throughput(
    checks: Checks,
    file: str,
    result: WorkerResult,
    *,
    batch: int,
    context: int,
    protocol: Protocol,
    extended_by_optimizer: bool = False,
) -> float | None:
    """Recompute every derived throughput figure; returns the recomputed median rate."""
    rates = check_windows(
        checks,
        file,
        result,
        batch=batch,
        context=context,
        protocol=protocol,
        extended_by_optimizer=extended_by_optimizer,
    )
    tp = result.throughput
    if tp is None:
        checks.fail("throughput.present", file, f"{file}: an ok result without throughput figures")
        return None
    if rates is None:
        return None
    _check_window_rates(checks, file, result, rates, list(tp.window_tokens_per_second), batch=batch, context=context)
    rate = median(rates)
    _check_rate_figures(checks, file, tp, rates, rate, batch=batch, context=context, protocol=protocol)
    flops = point_flops_per_token(result.recipe, context)
    check_roofline(checks, file, result, max(rates), flops)
    if tp.flops_per_token:
        checks.figure(
            "throughput.flops_per_token",
            file,
            flops,
            tp.flops_per_token,
            what="FLOPs/token",
            how=" (6 x matmul P + 12 x layers x heads x head_dim x L)",
            rel=1e-12,
        )
        if tp.mfu is not None and tp.peak_flops:
            mfu = flops * rate / tp.peak_flops
            checks.figure("throughput.mfu", file, mfu, tp.mfu, what="MFU", how=f" ({flops} x rate / {tp.peak_flops})")
    return rate


def _check_window_rates(
    checks: Checks,
    file: str,
    result: WorkerResult,
    rates: list[float],
    reported: list[float],
    *,
    batch: int,
    context: int,
) -> None:
    i = first_difference(rates, reported, rel=RATE_REL)
    if i is None:
        detail = f"{len(rates)} window rates match updates x B x L / seconds"
    elif i < len(result.windows):
        w = result.windows[i]
        detail = (
            f"window {i}: {w.updates} updates x {batch} x {context} tokens / {w.seconds} s = {rates[i]!r} tok/s, "
            f"result says {reported[i] if i < len(reported) else 'nothing'}"
        )
    else:
        detail = f"{len(reported)} reported rates for {len(rates)} windows"
    checks.figure("throughput.window_rates", file, rates, reported, message=detail, rel=RATE_REL)


def _check_rate_figures(
    checks: Checks,
    file: str,
    tp: Throughput,
    rates: list[float],
    rate: float,
    *,
    batch: int,
    context: int,
    protocol: Protocol,
) -> None:
    """The figures derived from the median rate and the rates' spread."""
    tokens = batch * context
    cv = sample_cv(rates)
    checks.figure(
        "throughput.median", file, rate, tp.tokens_per_second, what="median window rate", how=" tok/s", rel=RATE_REL
    )
    checks.figure(
        "throughput.sequences_per_second",
        file,
        rate / context,
        tp.sequences_per_second,
        what="sequences/s",
        how=f" (rate / {context})",
        rel=RATE_REL,
    )
    update_ms = 1000.0 * tokens / rate
    checks.figure(
        "throughput.update_ms",
        file,
        update_ms,
        tp.update_ms,
        what="update ms",
        how=f" (1000 x {tokens} / rate)",
        rel=RATE_REL,
    )
    checks.figure("throughput.cv", file, cv, tp.cv, what=f"sample CV of {len(rates)} window rates", rel=CV_REL)
    unstable = cv > protocol.cv_threshold
    checks.figure(
        "throughput.unstable",
        file,
        unstable,
        tp.unstable,
        message=f"CV {cv:.4%} vs threshold {protocol.cv_threshold:.0%} means unstable={unstable}, "
        f"result says unstable={tp.unstable}",
        given={"cv": cv, "threshold": protocol.cv_threshold},
    )


def point_flops_per_token(recipe: Recipe, context: int) -> int:
    m = recipe.model
    return flops_per_token(
        parameters=_params(recipe),
        lookup_parameters=lookup_parameters(vocab_size=m.vocab_size, d_model=m.d_model, knobs=knob_values(m)),
        n_layers=m.n_layers,
        n_heads=m.n_heads,
        head_dim=m.head_dim,
        context=context,
        knobs=knob_values(m),
    )


def _params(recipe: Recipe) -> int:
    m = recipe.model
    return parameters(
        vocab_size=m.vocab_size,
        d_model=m.d_model,
        n_layers=m.n_layers,
        n_heads=m.n_heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        ffn_dim=m.ffn_dim,
        knobs=knob_values(m),
    )


def check_point_recipe(
    checks: Checks,
    file: str,
    result: WorkerResult,
    *,
    model: str,
    batch: int,
    context: int,
    protocol: Protocol,
    frozen: Recipe | None,
    frozen_file: str,
) -> None:
    """Tokens per update, the recipe against the frozen one, and the parameter count."""
    r = result.recipe
    t, m = r.training, r.model
    ok = t.micro_batch_size == batch and m.context_length == context and t.batch_tokens == batch * context
    checks.expect(
        "recipe.tokens_per_update",
        ok,
        file,
        f"{file}: recipe has micro_batch_size {t.micro_batch_size}, context {m.context_length}, "
        f"batch_tokens {t.batch_tokens}; the point is B={batch}, L={context}, B x L = {batch * context}",
        micro_batch_size=t.micro_batch_size,
        context_length=m.context_length,
        batch_tokens=t.batch_tokens,
        expected_batch_tokens=batch * context,
    )
    if frozen is None:
        checks.fail(
            "recipe.frozen",
            file,
            f"{file}: no frozen resolved recipe for model {model!r} (looked for {frozen_file})",
            model=model,
        )
    else:
        expected = at_point(frozen, context_length=context, batch_size=batch, protocol=protocol)
        diffs = _differences(expected, r)
        checks.expect(
            "recipe.frozen",
            not diffs,
            file,
            f"{file}: recipe differs from frozen {frozen_file} at B={batch}, L={context}: "
            + "; ".join(f"{k} frozen {a!r}, result {b!r}" for k, a, b in diffs[:5])
            if diffs
            else f"{file}: recipe equals frozen {frozen_file} at B={batch}, L={context}",
            differences={k: {"frozen": a, "result": b} for k, a, b in diffs},
            frozen_file=frozen_file,
        )
    proto = {
        f"{section}.{name}": (getattr(protocol, protocol_field(section, name)), getattr(getattr(r, section), name))
        for section, names in PROTOCOL_RECIPE_FIELDS.items()
        for name in names
    }
    wrong = {k: v for k, v in proto.items() if v[0] != v[1]}
    checks.expect(
        "recipe.protocol",
        not wrong,
        file,
        f"{file}: recipe vs campaign protocol: "
        + ("; ".join(f"{k} protocol {a!r}, recipe {b!r}" for k, (a, b) in wrong.items()) or "all equal"),
        differences={k: {"protocol": a, "recipe": b} for k, (a, b) in wrong.items()},
    )
    count = _params(r)
    anchor = GUIDE_PARAMETERS.get(r.name)
    checks.figure(
        "recipe.parameters",
        file,
        count,
        result.parameters,
        what="parameters",
        how=" from the recipe",
        show="{:,}".format,
        suffix=f", the guide says {anchor:,} for {r.name}" if anchor is not None else "",
        same=result.parameters == count and (anchor is None or anchor == count),
        guide=anchor,
    )


def _differences(expected: Recipe, actual: Recipe) -> list[tuple[str, object, object]]:
    import msgspec

    a = msgspec.to_builtins(expected)
    b = msgspec.to_builtins(actual)
    out: list[tuple[str, object, object]] = []

    def walk(prefix: str, x: object, y: object) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                if key == "schema_version":
                    continue
                walk(f"{prefix}.{key}" if prefix else key, x.get(key), y.get(key))
        elif x != y:
            out.append((prefix, x, y))

    walk("", a, b)
    return out
