"""The exact batch script of one point, identical for Slurm and the local scheduler.

Resources (account, partition, GPUs, CPUs, memory, time, output file, working folder)
go on the sbatch command line as argv items (`schedulers.slurm.sbatch_argv`), so the
script has no #SBATCH lines and a profile value can never be read as a directive.

The body: `set -euo pipefail`, `cd` to the campaign folder, PYTHONPATH set to the frozen
source folders (absolute paths, by default `frozen/packages/<pkg>/src` for every frozen
package plus `frozen/extra` when present), then `exec` of the compute Python on
`throughput_sweep.node.watchdog` from that frozen tree, which runs the worker(s).

Every value that comes from a config, a profile, a path or a user is passed through
`shlex.quote`; comments carry values only as JSON strings (newlines escaped). A value
with a NUL byte, or a PYTHONPATH entry containing ':', is refused (`ValueError`): it
cannot be expressed faithfully.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from throughput_schema import ClusterProfile, PointSpec
from throughput_schema.layout import MANIFEST

__all__ = ["WorkerStep", "default_pythonpath", "render_job_script", "watchdog_argv"]

WATCHDOG_MODULE = "throughput_sweep.node.watchdog"


@dataclass(frozen=True)
class WorkerStep:
    """One worker process of the allocation: its full argv and its result file."""

    argv: Sequence[str]
    result: str | Path
    label: str = ""

    def as_json(self) -> str:
        obj = {"argv": [str(a) for a in self.argv], "result": str(self.result)}
        if self.label:
            obj["label"] = self.label
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def default_pythonpath(campaign: Path) -> list[Path]:
    """`frozen/packages/*/src` (sorted) and `frozen/extra` if present, as absolute paths."""
    frozen = Path(campaign).absolute() / "frozen"
    entries = sorted(p for p in (frozen / "packages").glob("*/src") if p.is_dir())
    if (frozen / "extra").is_dir():
        entries.append(frozen / "extra")
    return entries


def _check(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte: {value!r}")
    return value


def watchdog_argv(
    profile: ClusterProfile,
    *,
    python: str | Path,
    recipe: str | Path,
    steps: Sequence[WorkerStep],
    mode: str = "throughput",
    context_length: int | None = None,
    batch_size: int | None = None,
    deadline_seconds: float | None = None,
    manifest: str | Path | None = None,
) -> list[str]:
    """The argv that the script execs: the compute Python on the frozen watchdog."""
    if not steps:
        raise ValueError("a job needs at least one worker step")
    argv = [str(python), "-m", WATCHDOG_MODULE, "--recipe", str(recipe), "--mode", mode]
    if context_length is not None and batch_size is not None:
        argv += ["--context-length", str(context_length), "--batch-size", str(batch_size)]
    if manifest is not None:
        argv += ["--manifest", str(manifest)]
    if deadline_seconds is not None:
        argv += ["--deadline-seconds", _num(deadline_seconds)]
    else:
        argv += ["--deadline-minutes", _num(profile.watchdog_minutes)]
    argv += ["--time-limit-minutes", str(profile.time_limit_minutes), "--cpus", str(profile.cpus_per_task)]
    for step in steps:
        argv += ["--worker", step.as_json()]
    return [_check(a, "job script argument") for a in argv]


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render_job_script(
    profile: ClusterProfile,
    *,
    campaign: str | Path,
    recipe: str | Path,
    steps: Sequence[WorkerStep],
    pythonpath: Sequence[str | Path] | None = None,
    python: str | Path | None = None,
    point: PointSpec | None = None,
    mode: str | None = None,
    env: Mapping[str, str] | None = None,
    deadline_seconds: float | None = None,
) -> str:
    """The batch script text for one point.

    `campaign` is made absolute; relative `pythonpath` entries, `recipe` and `python`
    (when it contains a '/') are taken relative to the campaign folder and made absolute,
    so the script does not depend on where it is started. `python` defaults to
    `profile.python`. `env` adds exported variables (names must be identifiers).
    """
    campaign = Path(campaign).absolute()

    def absolute(p: str | Path) -> str:
        p = Path(p)
        return str(p if p.is_absolute() else campaign / p)

    entries = [absolute(e) for e in (default_pythonpath(campaign) if pythonpath is None else pythonpath)]
    for e in entries:
        if ":" in e:
            raise ValueError(f"PYTHONPATH entry contains ':' and cannot be used: {e!r}")
        _check(e, "PYTHONPATH entry")
    py = str(python if python is not None else profile.python)
    if "/" in py and not Path(py).is_absolute():
        py = absolute(py)
    mode = mode or (point.mode if point is not None else "throughput")
    argv = watchdog_argv(
        profile,
        python=py,
        recipe=absolute(recipe),
        steps=steps,
        mode=mode,
        context_length=point.context_length if point is not None else None,
        batch_size=point.batch_size if point is not None else None,
        deadline_seconds=deadline_seconds,
        manifest=campaign / MANIFEST if (campaign / MANIFEST).exists() else None,
    )
    lines = [
        "#!/bin/bash",
        "# Generated by throughput-sweep; resources are on the sbatch command line.",
    ]
    if point is not None:
        desc = {
            "model": point.model,
            "context_length": point.context_length,
            "batch_size": point.batch_size,
            "attempt": point.attempt,
            "mode": point.mode,
        }
        lines.append("# point: " + json.dumps(desc, ensure_ascii=True, sort_keys=True))
    lines.append("# profile: " + json.dumps(profile.name, ensure_ascii=True))
    lines += [
        "set -euo pipefail",
        f"cd -- {shlex.quote(_check(str(campaign), 'campaign path'))}",
        f"export PYTHONPATH={shlex.quote(':'.join(entries))}",
        "export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 PYTHONUNBUFFERED=1",
        "unset PYTHONHOME",
    ]
    env = env or {}
    for name in sorted(env):
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"not an environment variable name: {name!r}")
        lines.append(f"export {name}={shlex.quote(_check(str(env[name]), name))}")
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"
