"""Cluster profiles: which scheduler runs the jobs, with what resources and which Python.

    load_profile("local", root)                     # built in (a configs/clusters/local.yaml of your own overrides it)
    load_profile("configs/clusters/x.yaml", root)   # a path
    choose_profile(args.profile, root)              # --profile, then $THROUGHPUT_SWEEP_PROFILE, then local

A bad profile raises `CampaignError` with a one-line message naming the file and the field.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import msgspec

from throughput_schema import ClusterProfile, SchemaError, convert_input, read_yaml
from throughput_sweep.campaign import CampaignError, open_campaign
from throughput_sweep.schedulers import backend, detected

__all__ = ["PROFILE_ENV", "available_profiles", "choose_profile", "embedded_local_profile", "load_profile"]

PROFILE_ENV = "THROUGHPUT_SWEEP_PROFILE"


def embedded_local_profile() -> ClusterProfile:
    """The default: jobs as child processes of the watcher, with this Python."""
    return ClusterProfile(name="local", scheduler="local", python=sys.executable, mem="", cpus_per_task=8)


def load_profile(spec: str, root: Path, *, need_python: bool = True) -> ClusterProfile:
    """A profile by name (configs/clusters/NAME.yaml) or by path to a YAML file."""
    path = Path(spec)
    if not (spec.endswith((".yaml", ".yml")) or "/" in spec):
        path = root / "configs" / "clusters" / f"{spec}.yaml"
        if not path.exists() and spec == "local":
            return _absolute_python(embedded_local_profile(), root)
    try:
        raw = read_yaml(path)
    except FileNotFoundError:
        raise CampaignError(f"--profile {spec}: no such profile ({path} not found)") from None
    except SchemaError as exc:
        raise CampaignError(f"--profile {spec}: {exc}") from None
    if not isinstance(raw, dict):
        raise CampaignError(f"{path}: expected a mapping of profile fields")
    raw.setdefault("name", path.stem)
    try:
        profile = convert_input(raw, ClusterProfile, strict=False)
    except SchemaError as exc:
        raise CampaignError(f"{path}: {exc}") from None
    profile = _absolute_python(profile, root)
    problem = profile_problem(profile, need_python=need_python)
    if problem:
        raise CampaignError(f"{path}: {problem}")
    return profile


def available_profiles(root: Path) -> list[str]:
    return sorted({"local", *(p.stem for p in (root / "configs" / "clusters").glob("*.yaml"))})


def choose_profile(
    flag: str | None, root: Path, *, inherited: ClusterProfile | None = None, need_python: bool = True
) -> ClusterProfile:
    """--profile, then a follow-up's parent profile, then $THROUGHPUT_SWEEP_PROFILE, then local.

    The local default is taken only where no backend detects its scheduler (`Backend.detect`):
    on a login node it would train on the login node itself, so there the choice must be made.
    """
    if flag:
        return load_profile(flag, root, need_python=need_python)
    if inherited is not None:
        return inherited
    named = os.environ.get(PROFILE_ENV, "").strip()
    if named:
        try:
            return load_profile(named, root, need_python=need_python)
        except CampaignError as exc:
            raise CampaignError(f"{PROFILE_ENV}={named}: {exc}") from None
    found = detected()
    if found:
        raise CampaignError(
            f"{' and '.join(found)} was found, but no cluster profile was chosen; profiles: "
            f"{', '.join(available_profiles(root))} (or a YAML path); choose one with --profile NAME, "
            f"or once per shell with: export {PROFILE_ENV}=NAME"
        )
    return load_profile("local", root, need_python=need_python)


def missing_python(profile: ClusterProfile) -> bool:
    return "/" in profile.python and not Path(profile.python).exists()


_MEM = re.compile(r"[1-9][0-9]*[KMGT]?")


def profile_problem(profile: ClusterProfile, *, need_python: bool = True) -> str:
    """What makes a profile unusable ('' if nothing), as one line naming the field.

    `need_python=False` for a dry run, which may be previewed before the compute
    environment exists (its plan says so instead).
    """
    spare = profile.time_limit_minutes - profile.watchdog_minutes
    if spare < 1:
        return (
            f"watchdog_minutes {profile.watchdog_minutes:g} must be at least one minute below time_limit_minutes "
            f"{profile.time_limit_minutes}, so the watchdog records a timeout before the scheduler kills the job"
        )
    refused = backend(profile.scheduler).submit_args_problem(profile.extra_submit_args)
    if refused:
        return refused
    if profile.mem and not _MEM.fullmatch(profile.mem):
        return f"mem {profile.mem!r} is not a positive amount such as 64G, 512M or 65536 (megabytes)"
    if need_python and missing_python(profile):
        hint = "create it with: uv sync --locked" + (
            " (for the compute nodes, on one of them: UV_PROJECT_ENVIRONMENT=<that folder> uv sync --locked)"
            if backend(profile.scheduler).remote_nodes
            else ""
        )
        return f"python {profile.python}: no such compute Python; {hint}"
    return ""


def _absolute_python(profile: ClusterProfile, root: Path) -> ClusterProfile:
    """A relative `python` is relative to the repository root; the manifest keeps it absolute."""
    py = Path(profile.python)
    if not py.is_absolute() and ("/" in profile.python):
        py = root / py
        return msgspec.structs.replace(profile, python=str(py))
    return profile


def parent_profile(parent: Path | None):
    """A follow-up runs where its parent ran unless told otherwise."""
    if parent is None:
        return None
    try:
        profile = open_campaign(parent).manifest.profile
    except CampaignError:
        return None  # plan_optimizer says what is wrong with the parent
    problem = profile_problem(profile)
    if problem:
        raise CampaignError(
            f"{parent}: the parent campaign's profile {profile.name!r}: {problem}; or choose one with --profile"
        )
    return profile
