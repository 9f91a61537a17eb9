"""Energy checks, derived again from the counter's raw readings.

Per window: joules = (end_mj - start_mj) / 1000; mean power = joules / the interval
between the two reads; joules per token = joules / (updates x B x L). Per result: joules
per token is the median window's; mean power is the windows' joules over their
intervals. Every window's power lies in (0, power limit + 5%]; the counter never runs
backwards, within a window or from one window to the next; setup energy is positive.
Per Slurm job, where sacct records energy (ConsumedEnergyRaw, joules): the job used at
least the energy of its workers' windows.

Nothing here is imported from the schema's energy arithmetic (`throughput_schema.energy`):
the audit reaches the same figures by its own route, as `stats` does for the rest.
"""

from __future__ import annotations

from throughput_audit.campaign import AttemptRecord, kind
from throughput_audit.findings import Checks
from throughput_audit.stats import first_difference, median
from throughput_schema import Energy, WindowEnergy, WorkerResult
from throughput_schema.audit import Check
from throughput_schema.layout import BASELINE, RECEIPT, RESULT
from throughput_slurm.sacct import AccountingRow

POWER_MARGIN = 0.05
ENERGY_REL = 1e-9
# What Slurm stores for "no value" in a 64-bit field; a sacct that prints it recorded nothing.
_NO_VALUE = 2**63


def window_joules(result: WorkerResult) -> list[float] | None:
    """Each window's joules from its raw readings; None unless every window has them."""
    readings = [w.energy for w in result.windows]
    if not readings or any(e is None for e in readings):
        return None
    return [(e.end_mj - e.start_mj) / 1000.0 for e in readings if e is not None]


def check_energy(checks: Checks, file: str, result: WorkerResult, *, batch: int, context: int) -> None:
    """Every energy figure of one ok result against its windows' raw readings."""
    e = result.energy
    raw = _readings(checks, file, result)
    if e is None or raw is None:
        return
    _check_counter(checks, file, raw)
    tokens = batch * context
    joules = [(r.end_mj - r.start_mj) / 1000.0 for r in raw]
    seconds = [r.interval_seconds for r in raw]
    watts = [j / s for j, s in zip(joules, seconds)]
    per_token = [j / (w.updates * tokens) for j, w in zip(joules, result.windows)]
    for name, mine, theirs, how in (
        ("energy.window_joules", joules, [r.joules for r in raw], "(end - start mJ) / 1000"),
        ("energy.window_watts", watts, [r.mean_watts for r in raw], "joules / interval between the reads"),
        (
            "energy.window_joules_per_token",
            per_token,
            [r.joules_per_token for r in raw],
            f"joules / (updates x {tokens})",
        ),
    ):
        _series(checks, name, file, mine, theirs, how)

    jpt = median(per_token)
    checks.figure(
        "energy.joules_per_token", file, jpt, e.joules_per_token, what="median window joules per token", rel=ENERGY_REL
    )
    mean_watts = sum(joules) / sum(seconds)
    checks.figure(
        "energy.mean_watts",
        file,
        mean_watts,
        e.mean_watts,
        what="mean power",
        how=f" W ({sum(joules):.6g} J over {sum(seconds):.6g} s of windows)",
        rel=ENERGY_REL,
    )
    _check_interval(checks, file, result, e)
    _check_power(checks, file, watts, e.power_limit_watts)
    _check_setup(checks, file, e)


def _readings(checks: Checks, file: str, result: WorkerResult) -> list[WindowEnergy] | None:
    """Every window's raw readings where the result records energy; None (and why, as a
    finding) where the energy checks cannot run."""
    with_readings = sum(w.energy is not None for w in result.windows)
    if result.energy is None:
        if with_readings:
            checks.fail(
                "energy.present",
                file,
                f"{file}: {with_readings} of {len(result.windows)} windows carry energy readings, "
                "but the result records no energy",
            )
            return None
        reason = result.energy_unavailable or "the result records none (written before energy was measured)"
        checks.not_applicable("energy", f"{file}: energy checks not applicable: {reason}", file)
        return None
    if with_readings != len(result.windows) or not result.windows:
        checks.fail(
            "energy.present",
            file,
            f"{file}: the result records energy, but {with_readings} of {len(result.windows)} windows "
            "carry the counter's readings",
        )
        return None
    return [w.energy for w in result.windows if w.energy is not None]


def _check_counter(checks: Checks, file: str, raw: list[WindowEnergy]) -> None:
    """The counter never runs backwards, within a window or from one window to the next."""
    starts, ends = [r.start_mj for r in raw], [r.end_mj for r in raw]
    backwards = [f"window {i}: {s} -> {t} mJ" for i, (s, t) in enumerate(zip(starts, ends)) if t < s]
    backwards += [
        f"window {i} starts at {starts[i]} mJ, window {i - 1} ended at {ends[i - 1]} mJ"
        for i in range(1, len(raw))
        if starts[i] < ends[i - 1]
    ]
    checks.expect(
        "energy.counter",
        not backwards,
        file,
        f"{file}: the energy counter "
        + (
            "went backwards: " + "; ".join(backwards[:3])
            if backwards
            else f"never went backwards over {len(raw)} windows ({starts[0]} to {ends[-1]} mJ)"
        ),
        start_mj=starts,
        end_mj=ends,
    )


def _check_interval(checks: Checks, file: str, result: WorkerResult, e: Energy) -> None:
    span = result.optimizer_timing is not None
    want = "span" if span else "window"
    checks.expect(
        "energy.interval",
        e.interval == want,
        file,
        f"{file}: power over the {e.interval} interval; "
        + ("an instrumented result's windows leave out the event reads: the span" if span else "the timed window")
        + (" is expected" if e.interval != want else ""),
        interval=e.interval,
        expected=want,
    )


def _check_setup(checks: Checks, file: str, e: Energy) -> None:
    if e.setup_joules is None:
        checks.not_applicable("energy.setup", f"{file}: setup energy not applicable: setup was not read", file)
    else:
        checks.expect(
            "energy.setup",
            e.setup_joules > 0,
            file,
            f"{file}: setup (compile and capture) used {e.setup_joules:.6g} J"
            + ("" if e.setup_joules > 0 else ", not a positive energy"),
            setup_joules=e.setup_joules,
        )


def _series(checks: Checks, name: str, file: str, mine: list[float], theirs: list[float], how: str) -> None:
    i = first_difference(mine, theirs, rel=ENERGY_REL)
    detail = (
        f"{len(mine)} windows match {how}"
        if i is None
        else f"window {i}: {how} gives {mine[i]!r}, the result says {theirs[i]!r}"
    )
    checks.figure(name, file, mine, theirs, message=detail, rel=ENERGY_REL)


def _check_power(checks: Checks, file: str, watts: list[float], limit: float | None) -> None:
    low = [(i, w) for i, w in enumerate(watts) if not w > 0]
    checks.expect(
        "energy.power",
        not low,
        file,
        f"{file}: window power {_watts(watts)}"
        + (f"; window {low[0][0]} is not above zero" if low else ", every window above zero"),
        watts=watts,
    )
    if limit is None:
        checks.not_applicable(
            "energy.power_limit", f"{file}: power limit not applicable: the result records no power limit", file
        )
        return
    ceiling = limit * (1.0 + POWER_MARGIN)
    high = [(i, w) for i, w in enumerate(watts) if w > ceiling]
    checks.expect(
        "energy.power_limit",
        not high,
        file,
        f"{file}: window power {_watts(watts)} against the power limit {limit:g} W + {POWER_MARGIN:.0%} "
        f"= {ceiling:g} W" + (f"; window {high[0][0]} draws {high[0][1]:.1f} W, above it" if high else ""),
        watts=watts,
        limit=limit,
        ceiling=ceiling,
    )


def _watts(watts: list[float]) -> str:
    return f"{min(watts):.1f} - {max(watts):.1f} W" if watts else "none"


def job_energy(row: AccountingRow) -> float | None:
    """The job's joules as sacct records them; None where the cluster records no energy."""
    text = row.consumed_energy_raw.strip()
    if not text:
        return None
    value = float(text)  # ValueError: the caller reports the unreadable figure
    return None if value <= 0 or value >= _NO_VALUE else value


def check_job_energy(r: AttemptRecord, row: AccountingRow, checks: Checks) -> None:
    """The job's recorded energy is at least its workers' windows' (result and baseline)."""
    file = r.file(RECEIPT)
    try:
        used = job_energy(row)
    except ValueError:
        checks.fail(
            "slurm.energy",
            file,
            f"{file}: job {row.job_id}'s ConsumedEnergyRaw {row.consumed_energy_raw!r} is not a number of joules",
        )
        return
    if used is None:
        checks.not_applicable(
            "slurm.energy",
            f"{file}: not applicable: the cluster records no energy (sacct ConsumedEnergyRaw "
            f"{row.consumed_energy_raw!r} for job {row.job_id})",
            file,
        )
        return
    workers = [
        (name, res)
        for name, res in ((RESULT, r.attempt.result), (BASELINE, r.attempt.baseline))
        if res is not None and kind(res) == "ok"
    ]
    measured = [(name, j) for name, res in workers if (j := window_joules(res)) is not None]
    if not measured:
        checks.not_applicable(
            "slurm.energy",
            f"{file}: not applicable: job {row.job_id} used {used:,.0f} J, but no result of it records "
            "the GPU's energy in its windows",
            file,
        )
        return
    windows = sum(sum(j) for _, j in measured)
    checks.expect(
        "slurm.energy",
        used >= windows,
        file,
        f"{file}: job {row.job_id} used {used:,.0f} J (sacct ConsumedEnergyRaw); its windows "
        f"({', '.join(name for name, _ in measured)}) measured {windows:,.1f} J"
        + ("" if used >= windows else ": the job recorded less than its windows"),
        job_id=row.job_id,
        job_joules=used,
        window_joules=windows,
    )


def summary_line(items: list[Check]) -> str:
    """One line for the command's summary: the results checked against their counters' raw
    readings and those without energy, and the jobs' recorded energy, or why not."""
    checked = {c.file for c in items if c.name == "energy.joules_per_token"}
    without = [c for c in items if c.name == "energy"]
    parts = [f"{len(checked)} results checked from the counter's raw readings"] if checked else []
    if without:
        why = sorted({c.message.rsplit("not applicable: ", 1)[-1] for c in without})
        parts.append(f"{len(without)} without energy: not applicable ({'; '.join(why[:2])})")
    jobs = [c for c in items if c.name == "slurm.energy"]
    if jobs:
        counts = {s: sum(c.status == s for c in jobs) for s in ("pass", "fail", "not_applicable")}
        if counts["not_applicable"] == len(jobs) and all("the cluster records no energy" in c.message for c in jobs):
            parts.append(f"Slurm job energy: not applicable: the cluster records no energy ({len(jobs)} jobs)")
        else:
            parts.append(
                f"Slurm job energy: {counts['pass']} jobs at least their windows', {counts['fail']} below, "
                f"{counts['not_applicable']} not applicable"
            )
    return "energy: " + ("; ".join(parts) if parts else "no measured result")
