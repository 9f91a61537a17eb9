"""The environment every Slurm command of ours runs in: the user's, without what would change it.

A job's options come from its profile alone (frozen in the manifest), and what Slurm prints
must be read the same way in every shell, so `slurm_environment(os.environ)` returns the
environment for sbatch, squeue, sacct, scontrol, sinfo, sacctmgr and scancel, and the
variables it took out (recorded in the manifest as `scheduler_environment_removed`):

  * every `SBATCH_*` variable: each is an sbatch option (SBATCH_TIMELIMIT, SBATCH_QOS,
    SBATCH_EXCLUSIVE, SBATCH_RESERVATION, SBATCH_WAIT, SBATCH_EXPORT, ...), and sbatch's
    environment is also the job's;
  * every `SLURM_*` variable but `SLURM_CONF` (which says which cluster the client talks
    to) and `SLURM_JWT` (the user's token on sites with auth/jwt; a secret, never recorded):
    an enclosing allocation's SLURM_JOB_ID, SLURM_CPUS_ON_NODE, ... would otherwise
    reach the job, and SLURM_CLUSTERS would send the commands to another cluster;
  * the other commands' own option variables (SQUEUE_*, SACCT_*, SCANCEL_*, SINFO_*,
    SCONTROL_*, SACCTMGR_*): the argv of every query says all it means;
  * and `SLURM_TIME_FORMAT=standard` is set, so times are full ISO dates whatever the
    user's shell says (a user's own value counts as removed).

The queries (`query_environment`: squeue, sacct, scontrol, sinfo, sacctmgr, scancel) also
run with `TZ=UTC` (`QUERY_ZONE`): Slurm's clients print and read times in their process's
zone, with no offset, and the login node, the laptop, CI and the colleague who audits each
have their own. So every time the tool reads from Slurm is UTC (`slurm_instant` writes it
with its offset, as records keep it), and every time it passes to Slurm is written in UTC
(`slurm_time`): pinning one side alone would move a lookup window by hours. sbatch keeps
the user's TZ: its environment is also the job's.

They are removed, not refused: such variables are usually set for interactive work (a
site module, a .bashrc) and are right there; refusing would make the user unset them
for every run, while the profile already says everything the job needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = ["QUERY_ZONE", "TIME_FORMAT", "query_environment", "slurm_environment", "slurm_instant", "slurm_time"]

TIME_FORMAT = "standard"
QUERY_ZONE = "UTC"
_KEPT = frozenset({"SLURM_CONF", "SLURM_JWT"})
_PREFIXES = ("SBATCH_", "SLURM_", "SQUEUE_", "SACCT_", "SCANCEL_", "SINFO_", "SCONTROL_", "SACCTMGR_")


def slurm_environment(base: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the environment for a Slurm command, {removed name: its value}) from `base`."""
    env: dict[str, str] = {}
    removed: dict[str, str] = {}
    for name, value in base.items():
        if name.startswith(_PREFIXES) and name not in _KEPT:
            if not (name == "SLURM_TIME_FORMAT" and value == TIME_FORMAT):
                removed[name] = value
        else:
            env[name] = value
    env["SLURM_TIME_FORMAT"] = TIME_FORMAT
    return env, dict(sorted(removed.items()))


def query_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`slurm_environment`'s, in `QUERY_ZONE`: for every Slurm command but sbatch."""
    return {**slurm_environment(base)[0], "TZ": QUERY_ZONE}


def slurm_time(when: datetime) -> str:
    """`when` as a query's -S/-E (--starttime/--endtime) reads it; a naive time is local."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


# A full date and time without an offset, as a query prints it under TIME_FORMAT.
_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def slurm_instant(text: str) -> str:
    """A time a query printed ('2026-12-03T06:29:02'), with its offset ('...+00:00');
    anything else ('Unknown', 'None', '', text not a full date) as it is."""
    return text + "+00:00" if _NAIVE.fullmatch(text) else text
