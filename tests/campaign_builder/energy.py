"""The GPU's energy counter in built campaigns: a meter with planned readings.

`with_energy` gives a worker result the counter's raw readings around each window, as a
GPU drawing `watts` would have counted them (the derived figures from the schema's one
home, `throughput_schema.energy`); `add_energy` does so for every ok result of a built
campaign and has its Slurm jobs record energy (ConsumedEnergyRaw) or none.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from campaign_builder.complete import BuiltCampaign
from throughput_schema import Receipt, WorkerResult, outcome_kind, read, write_atomic
from throughput_schema.energy import EnergySource, derive_window, summarize
from throughput_schema.layout import BASELINE, RECEIPT, RESULT
from throughput_slurm.sacct import job_accounting

POWER_LIMIT = 700.0
# The counter's reading when the worker started, and what the GPU drew between windows.
FIRST_MJ = 8_000_000_000
BETWEEN_MJ = 150_000
SETUP_JOULES = 9_000.0


def with_energy(
    result: WorkerResult,
    *,
    watts: float = 600.0,
    power_limit: float | None = POWER_LIMIT,
    setup_joules: float | None = SETUP_JOULES,
) -> WorkerResult:
    """`result` with the counter read around each of its windows; an instrumented result's
    interval is the span (its windows' seconds leave out the event reads)."""
    span = result.optimizer_timing is not None
    tokens = result.recipe.training.micro_batch_size * result.recipe.model.context_length
    at = FIRST_MJ + round(1000 * (setup_joules or 0.0))
    windows = []
    for i, w in enumerate(result.windows):
        interval = w.seconds * (1.02 if span else 1.0)
        drawn = watts * (1.0 + 0.004 * ((i % 3) - 1))
        end = at + round(1000 * drawn * interval)
        windows.append(msgspec.structs.replace(w, energy=derive_window(at, end, interval, w.updates * tokens)))
        at = end + BETWEEN_MJ
    energy = summarize(
        [w.energy for w in windows if w.energy is not None],
        EnergySource(device_name=result.hardware.gpu_name or "NVIDIA H200"),
        power_limit_watts=power_limit,
        setup_joules=setup_joules,
        setup_seconds=result.setup_seconds,
        interval="span" if span else "window",
    )
    return msgspec.structs.replace(result, windows=windows, energy=energy, energy_unavailable="")


def window_joules(result: WorkerResult) -> float:
    return sum(w.energy.joules for w in result.windows if w.energy is not None)


def add_energy(built: BuiltCampaign, *, watts: float = 600.0, job_factor: float | None = 1.5) -> BuiltCampaign:
    """Every ok result (and baseline) of `built` with energy; each job's sacct row and
    receipt record `job_factor` x its windows' joules (a failed job's a fixed figure), or,
    with `job_factor` None, no energy, as the test Slurm does."""
    for points in built.points.values():
        for folder in points.values():
            used = 0.0
            for name in (RESULT, BASELINE):
                path = Path(folder) / name
                if not path.is_file():
                    continue
                res = read(path, WorkerResult)
                if outcome_kind(res.outcome) == "ok":
                    res = with_energy(res, watts=watts)
                    write_atomic(path, res)
                    used += window_joules(res) + SETUP_JOULES
            receipt = read(Path(folder) / RECEIPT, Receipt)
            assert receipt.accounting is not None, "a built campaign's receipts hold their accounting"
            raw = "" if job_factor is None else str(round(job_factor * used) if used else 4_200)
            row = msgspec.structs.replace(built.rows[receipt.job_id], consumed_energy_raw=raw)
            built.rows[receipt.job_id] = row
            write_atomic(Path(folder) / RECEIPT, msgspec.structs.replace(receipt, accounting=job_accounting(row)))
    return built


def rederived(result: WorkerResult, readings: list[tuple[int, int, float]]) -> WorkerResult:
    """A forger's edit: the windows' raw readings replaced by `readings` (start mJ, end mJ,
    interval), every derived energy figure made to agree with them."""
    assert result.energy is not None, "rederived edits a result that records energy"
    tokens = result.recipe.training.micro_batch_size * result.recipe.model.context_length
    windows = [
        msgspec.structs.replace(w, energy=derive_window(start, end, interval, w.updates * tokens))
        for w, (start, end, interval) in zip(result.windows, readings, strict=True)
    ]
    e = result.energy
    energy = summarize(
        [w.energy for w in windows if w.energy is not None],
        e.source,
        power_limit_watts=e.power_limit_watts,
        setup_joules=e.setup_joules,
        setup_seconds=e.setup_seconds,
        interval=e.interval,
    )
    return msgspec.structs.replace(result, windows=windows, energy=energy)


def readings(result: WorkerResult) -> list[tuple[int, int, float]]:
    return [(w.energy.start_mj, w.energy.end_mj, w.energy.interval_seconds) for w in result.windows if w.energy]
