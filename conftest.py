"""Repository-wide pytest fixtures (collected for tests/ and packages/*/tests), and the
shared test helpers of tests/ (campaign_builder, campaign_helpers, scripted_worker)
importable from every package's tests."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

# The test machine has Slurm installed, where a campaign without a profile is refused
# rather than run locally; tests that mean the local scheduler say so once, here. The
# tests of that refusal remove it (test_profiles.py, test_quickstart.py).
os.environ.setdefault("THROUGHPUT_SWEEP_PROFILE", "local")
LOCAL_SLURM_SCRIPT = REPO_ROOT / "tools" / "local-slurm.sh"
LOCAL_SLURM_PROFILE = REPO_ROOT / "configs" / "clusters" / "local-slurm.yaml"
# Which Slurm the `slurm` tests use: LOCAL_SLURM_VERSION, as tools/local-slurm.sh reads it
# (24.11 runs from a Debian 13 root, tools/local-slurm-root.sh). On 24.11 only the tests
# marked `slurm2411` (the production path) run; the other Slurm tests skip, saying so.
SLURM_VERSIONS = ("22.05", "24.11")
SLURM_VERSION = os.environ.get("LOCAL_SLURM_VERSION", "22.05")


def pytest_configure(config):
    if SLURM_VERSION not in SLURM_VERSIONS:
        raise pytest.UsageError(f"LOCAL_SLURM_VERSION={SLURM_VERSION}: use one of {', '.join(SLURM_VERSIONS)}")


def pytest_collection_modifyitems(config, items):
    if SLURM_VERSION == "22.05":
        return
    skip = pytest.mark.skip(reason=f"not marked slurm2411: runs on Slurm 22.05 only, not {SLURM_VERSION}")
    for item in items:
        if item.get_closest_marker("slurm") and not item.get_closest_marker("slurm2411"):
            item.add_marker(skip)


@dataclasses.dataclass(frozen=True)
class LocalSlurm:
    """The single-node Slurm of tools/local-slurm.sh, as the tests see it."""

    version: str
    account: str
    partition: str
    state_dir: Path
    slurm_conf: Path
    profile_path: Path


def _run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOCAL_SLURM_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _local_slurm_problem() -> str | None:
    """None when the local Slurm (of SLURM_VERSION) answers, starting it once if needed, else why not."""
    try:
        if _run_script("status", timeout=60).returncode == 0:
            return None
        started = _run_script("start", timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"tools/local-slurm.sh could not run: {exc}"
    if started.returncode != 0:
        tail = (started.stderr or started.stdout).strip()[-2000:]
        return f"tools/local-slurm.sh start failed (exit {started.returncode}):\n{tail}"
    if _run_script("status", timeout=60).returncode != 0:
        return "tools/local-slurm.sh started, but status still fails"
    return None


def _script_env() -> dict[str, str]:
    """The environment after `eval "$(tools/local-slurm.sh env)"` (SLURM_CONF; on 24.11 also PATH)."""
    shown = subprocess.run(
        ["bash", "-c", 'eval "$("$0" env)" && env -0', str(LOCAL_SLURM_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(entry.split("=", 1) for entry in shown.split("\0") if "=" in entry)


@pytest.fixture(scope="session")
def local_slurm():
    """A running local Slurm of LOCAL_SLURM_VERSION; skips without one, fails instead when
    REQUIRE_SLURM=1. Its clients (sbatch, squeue, sacct...) come first on PATH for the session."""
    problem = _local_slurm_problem()
    if problem is not None:
        if os.environ.get("REQUIRE_SLURM") == "1":
            pytest.fail(f"REQUIRE_SLURM=1 but local Slurm {SLURM_VERSION} is unavailable: {problem}", pytrace=False)
        pytest.skip(f"local Slurm {SLURM_VERSION} unavailable: {problem}")

    env = _script_env()
    import yaml  # only the Slurm fixture needs it, and not every member declares pyyaml

    profile = yaml.safe_load(LOCAL_SLURM_PROFILE.read_text())
    slurm_conf = env["SLURM_CONF"]
    state_dir = env["LOCAL_SLURM_2411_DIR" if SLURM_VERSION == "24.11" else "LOCAL_SLURM_DIR"]

    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"] = slurm_conf
    os.environ["PATH"] = env["PATH"]
    try:
        yield LocalSlurm(
            version=SLURM_VERSION,
            account=profile["account"],
            partition=profile["partition"],
            state_dir=Path(state_dir),
            slurm_conf=Path(slurm_conf),
            profile_path=LOCAL_SLURM_PROFILE,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
