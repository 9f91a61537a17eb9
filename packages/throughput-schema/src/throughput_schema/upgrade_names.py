"""The names a campaign kept before they became the scheduler's own, for `upgrade`: the
profile's `extra_sbatch_args` (now `extra_submit_args`, which each backend checks) and a
local job's output file `slurm-<id>.out` (now `local_jobs.job_log`, `local-<id>.out`).

Version-1 campaigns hold them, and so do version-2 campaigns written before the names
changed; a record would read the old field as absent (records skip fields they do not
know) and lose its submit arguments, and the sweep would look for a local job's output
under the new name and find none. The upgrade renames the field wherever a campaign keeps a
profile (the manifest's, the ones `run --resume --profile` replaced, results.json's) and
each local job's output in its attempt folder. A job still running keeps writing its output
through the file it opened, whatever the file's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from throughput_schema.layout import attempt_folders
from throughput_schema.local_jobs import job_log

__all__ = ["OLD_SUBMIT_ARGS", "local_logs", "profiles_renamed"]

OLD_SUBMIT_ARGS = "extra_sbatch_args"
SUBMIT_ARGS = "extra_submit_args"
_OLD_LOG = ("slurm-", ".out")


def profiles_renamed(obj: dict) -> bool:
    """Rename the field in every profile `obj` (a manifest's or results.json's object) holds,
    in place and at the same position; whether any held it."""
    found = _renamed(obj.get("profile"))
    for entry in obj.get("profile_replacements") or []:
        found = (isinstance(entry, dict) and _renamed(entry.get("old"))) or found
    return found


def _renamed(profile: Any) -> bool:
    if not isinstance(profile, dict) or OLD_SUBMIT_ARGS not in profile:
        return False
    if SUBMIT_ARGS in profile:  # both: the old one is a leftover the new one replaced
        del profile[OLD_SUBMIT_ARGS]
        return True
    items = [(SUBMIT_ARGS if key == OLD_SUBMIT_ARGS else key, value) for key, value in profile.items()]
    profile.clear()
    profile.update(items)
    return True


def local_logs(root: Path) -> dict[Path, Path]:
    """Each local job's output under its old name, and its name today, where that is free."""
    head, tail = _OLD_LOG
    moves = {}
    for folder in attempt_folders(root):
        for old in sorted(folder.glob(f"{head}*{tail}")):
            job_id = old.name[len(head) : -len(tail)]
            new = folder / job_log(job_id)
            if job_id.isdigit() and not new.exists():
                moves[old] = new
    return moves
