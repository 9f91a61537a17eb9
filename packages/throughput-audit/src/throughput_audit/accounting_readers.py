"""Each scheduler's accounting reader: what the audit checks a campaign's jobs against,
found by the scheduler's name in `READERS` (Slurm's sacct in `accounting`, the local
scheduler's job registry in `local_registry`). `READERS.check()` refuses a listed
scheduler name without a reader here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from throughput_audit import slurm
from throughput_audit.accounting import check_slurm
from throughput_audit.campaign import Loaded
from throughput_audit.findings import Checks
from throughput_audit.local_registry import check_local
from throughput_schema.audit import SchedulerAccounting
from throughput_schema.layout import MANIFEST
from throughput_schema.scheduler_names import SchedulerParts


@dataclass(frozen=True)
class AccountingOptions:
    runner: slurm.Runner | None
    slurm_checks: bool
    settle_seconds: float
    sacct_window: timedelta


@dataclass(frozen=True)
class AccountingRead:
    text: str  # accounting.txt
    scheduler_accounting: SchedulerAccounting


def read_slurm(loaded: Loaded, checks: Checks, options: AccountingOptions) -> AccountingRead:
    if not options.slurm_checks:
        checks.not_applicable("slurm", "Slurm accounting checks were skipped", MANIFEST)
        return AccountingRead(_not_applicable(loaded), "not_applicable")
    text, available = check_slurm(
        loaded, checks, runner=options.runner, settle_seconds=options.settle_seconds, sacct_window=options.sacct_window
    )
    return AccountingRead(text, "checked" if available else "not_available")


def read_local(loaded: Loaded, checks: Checks, options: AccountingOptions) -> AccountingRead:
    profile = loaded.manifest.profile
    checks.not_applicable(
        "slurm",
        f"{MANIFEST}: profile {profile.name!r} uses the local scheduler: Slurm accounting is not applicable",
        MANIFEST,
    )
    return AccountingRead(_not_applicable(loaded) + check_local(loaded, checks), "checked")


def _not_applicable(loaded: Loaded) -> str:
    m = loaded.manifest
    return f"# {m.name}: scheduler {m.profile.scheduler}; Slurm accounting not applicable\n"


AccountingReader = Callable[[Loaded, Checks, AccountingOptions], AccountingRead]

READERS: SchedulerParts[AccountingReader] = SchedulerParts(
    "accounting reader in the audit", {"slurm": read_slurm, "local": read_local}
)
