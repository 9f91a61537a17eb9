"""The environment every Slurm command of ours runs in: the user's, without what would change it.

A job's options come from its profile alone (frozen in the manifest), and what Slurm prints
must be read the same way in every shell, so `slurm_environment(os.environ)` returns the
environment for sbatch, squeue, sacct, scontrol, sinfo, sacctmgr and scancel, and the
variables it took out (recorded in the manifest as `slurm_environment_removed`):

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

They are removed, not refused: such variables are usually set for interactive work (a
site module, a .bashrc) and are right there; refusing would make the user unset them
for every run, while the profile already says everything the job needs.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["TIME_FORMAT", "slurm_environment"]

TIME_FORMAT = "standard"
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
