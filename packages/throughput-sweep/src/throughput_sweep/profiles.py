"""Cluster profiles: which scheduler runs the jobs, with what resources and which Python.

    load_profile("local", root)                     # configs/clusters/local.yaml, else built in
    load_profile("configs/clusters/x.yaml", root)   # a path

A bad profile raises `CampaignError` with a one-line message.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from throughput_schema import ClusterProfile, SchemaError, convert_input
from throughput_sweep.campaign import CampaignError

__all__ = ["embedded_local_profile", "load_profile"]


def embedded_local_profile() -> ClusterProfile:
    """The default: jobs as child processes of the watcher, with this Python."""
    return ClusterProfile(name="local", scheduler="local", python=sys.executable, mem="", cpus_per_task=8)


def load_profile(spec: str, root: Path) -> ClusterProfile:
    """A profile by name (configs/clusters/NAME.yaml) or by path to a YAML file."""
    import yaml

    path = Path(spec)
    if not (spec.endswith((".yaml", ".yml")) or "/" in spec):
        path = root / "configs" / "clusters" / f"{spec}.yaml"
        if not path.exists() and spec == "local":
            return _absolute_python(embedded_local_profile(), root)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise CampaignError(f"--profile {spec}: no such profile ({path} not found)") from None
    except OSError as exc:
        raise CampaignError(f"--profile {spec}: cannot read {path} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise CampaignError(f"{path}: malformed YAML{where}") from None
    if not isinstance(raw, dict):
        raise CampaignError(f"{path}: expected a mapping of profile fields")
    raw.setdefault("name", path.stem)
    try:
        profile = convert_input(raw, ClusterProfile, strict=False)
    except SchemaError as exc:
        raise CampaignError(f"{path}: {exc}") from None
    return _absolute_python(profile, root)


def _absolute_python(profile: ClusterProfile, root: Path) -> ClusterProfile:
    """A relative `python` is relative to the repository root; the manifest keeps it absolute."""
    py = Path(profile.python)
    if not py.is_absolute() and ("/" in profile.python):
        py = root / py
        return msgspec.structs.replace(profile, python=str(py))
    return profile
