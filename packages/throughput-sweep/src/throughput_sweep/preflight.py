"""Before a campaign is created: can its first job ever run here, and what will slow it?

`run` (and `run --dry-run`) of a new campaign calls `gate(preview)`, which asks the
profile's backend (`Backend.preflight`: Slurm's asks the cluster, `schedulers.slurm.preflight`).
Each problem is one line naming the profile field and the scheduler's limit; with any, the
campaign is not created and `run` exits 2. A question the scheduler did not answer is a
note ("not checked"), never a pass.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from throughput_sweep.campaign import Campaign
from throughput_sweep.schedulers import backend

__all__ = ["Verdict", "gate"]

PROG = "throughput-sweep"


@dataclass(frozen=True)
class Verdict:
    """What the preflight says (`lines`, for stderr) and run's exit status (2: refused)."""

    lines: list[str]
    exit_status: int = 0

    def print(self) -> None:
        for line in self.lines:
            print(line, file=sys.stderr)


def gate(campaign: Campaign, *, dry_run: bool, skip: bool = False) -> Verdict:
    """The preflight of a campaign about to be created (`campaign` is its preview).

    `skip` (run's hidden --no-preflight) lets a test reach the scheduler's own refusal at submission."""
    from throughput_sweep.curves import derive

    profile = campaign.manifest.profile
    if skip:
        return Verdict(["[sweep] preflight: skipped (--no-preflight)"])
    found = backend(profile.scheduler).preflight(campaign, derive(campaign.manifest, []), dry_run=dry_run)
    if isinstance(found, str):
        return Verdict([f"[sweep] preflight: {found}"])
    lines = [f"[sweep] note: {note}" for note in found.notes]
    if found.problems:
        what = "nothing was written" if dry_run else "the campaign was not created"
        lines += [f"{PROG}: {problem}" for problem in found.problems]
        lines.append(f"[sweep] preflight: the first job could never run here; {what}")
        return Verdict(lines, 2)
    return Verdict(lines + [f"[sweep] preflight passed: {'; '.join(found.checked)}"])
