"""The sbatch command line of one job: what goes on it, and what a profile may not add to it.

Resources go on the command line, not in the batch script, each as one argv item, so a
profile value is only ever an argument. `extra_submit_args` are checked here as sbatch
would read them (`forbidden_sbatch_args`), since the watcher follows single jobs that
are never requeued.
"""

from __future__ import annotations

from pathlib import Path

from throughput_schema import ClusterProfile

__all__ = ["forbidden_sbatch_args", "job_log", "sbatch_argv", "submit_args_problem"]


def job_log(job_id: str) -> str:
    """A job's output file in its attempt folder, as sbatch names it (--output=slurm-%j.out)."""
    return f"slurm-{job_id}.out"


def sbatch_argv(
    profile: ClusterProfile, script: Path, *, token: str, workdir: Path, sbatch: str = "sbatch"
) -> list[str]:
    """The exact sbatch command line for one job (resources here, not in the script)."""
    # --no-requeue: after a node failure Slurm would otherwise rerun the job under the same id
    # in the same attempt folder, measuring the point again behind the watcher's back.
    workdir = Path(workdir).absolute()  # a relative --output would be resolved inside --chdir
    argv = [sbatch, "--parsable", "--no-requeue", f"--job-name={token}", f"--comment={token}"]
    if profile.account:
        argv.append(f"--account={profile.account}")
    if profile.partition:
        argv.append(f"--partition={profile.partition}")
    argv += [
        f"--gpus={profile.gpus_per_job}",
        f"--cpus-per-task={profile.cpus_per_task}",
        *([f"--mem={profile.mem}"] if profile.mem else []),
        f"--time={profile.time_limit_minutes}",
        f"--output={workdir / job_log('%j')}",
        f"--chdir={workdir}",
        *profile.extra_submit_args,
        str(script),
    ]
    return argv


# sbatch's long options a campaign cannot follow, and its short ones for two of them.
_FORBIDDEN_LONG = ("clusters", "array", "requeue")
_FORBIDDEN_SHORT = frozenset("Ma")
# sbatch's short options that take no argument: after one of these, the next letter of
# the same word ("-HM") is another option.
_NO_ARGUMENT = frozenset("HhIkOQsuVvW")


def forbidden_sbatch_args(args: list[str]) -> list[str]:
    """The items of `args` that are --clusters, --array or --requeue in any spelling sbatch
    takes: -M x, -Mx, --clusters=x, --clu x (getopt accepts unambiguous prefixes), -a, -Ha1-3."""
    bad = []
    for arg in args:
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0]
            if len(name) >= 3 and any(full.startswith(name) for full in _FORBIDDEN_LONG):
                bad.append(arg)
        elif arg.startswith("-") and len(arg) > 1:
            for letter in arg[1:]:
                if letter in _FORBIDDEN_SHORT:
                    bad.append(arg)
                if letter not in _NO_ARGUMENT:
                    break  # an option with an argument: the rest of the word is its value
    return bad


def submit_args_problem(args: list[str]) -> str:
    forbidden = forbidden_sbatch_args(args)
    if not forbidden:
        return ""
    return (
        f"extra_submit_args {' '.join(forbidden)}: --clusters/-M, --array/-a and --requeue are not allowed "
        "(the watcher follows single jobs on this cluster, and a requeued job would measure its point twice); remove them"
    )
