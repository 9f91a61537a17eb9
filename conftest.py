"""Repository-wide pytest fixtures (collected for tests/ and packages/*/tests), and the
shared test helpers of tests/ (campaign_builder, campaign_helpers, scripted_worker)
importable from every package's tests."""

from __future__ import annotations

import dataclasses
import os
import shlex
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


@dataclasses.dataclass(frozen=True)
class LocalSlurm:
    """The single-node Slurm of tools/local-slurm.sh, as the tests see it."""

    account: str
    partition: str
    state_dir: Path
    slurm_conf: Path
    profile_path: Path


def _run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOCAL_SLURM_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _local_slurm_problem() -> str | None:
    """None when the local Slurm answers (starting it once if needed), else why not."""
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


@pytest.fixture(scope="session")
def local_slurm():
    """A running local Slurm; skips without one, fails instead when REQUIRE_SLURM=1."""
    problem = _local_slurm_problem()
    if problem is not None:
        if os.environ.get("REQUIRE_SLURM") == "1":
            pytest.fail(f"REQUIRE_SLURM=1 but local Slurm is unavailable: {problem}", pytrace=False)
        pytest.skip(f"local Slurm unavailable: {problem}")

    # `env` prints shell lines such as: export SLURM_CONF=/path
    words = shlex.split(_run_script("env", timeout=30).stdout)
    env = dict(word.split("=", 1) for word in words if "=" in word)
    import yaml  # only the Slurm fixture needs it, and not every member declares pyyaml

    profile = yaml.safe_load(LOCAL_SLURM_PROFILE.read_text())

    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    try:
        yield LocalSlurm(
            account=profile["account"],
            partition=profile["partition"],
            state_dir=Path(env["LOCAL_SLURM_DIR"]),
            slurm_conf=Path(env["SLURM_CONF"]),
            profile_path=LOCAL_SLURM_PROFILE,
        )
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
