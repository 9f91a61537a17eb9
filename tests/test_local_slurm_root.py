"""Slurm 24.11 of tools/local-slurm-root.sh without its daemons: the configuration it takes
from local-slurm.sh's generator, and a start that cannot work (one line, and the 24.11 tests
fail under REQUIRE_SLURM=1 instead of skipping).

Every test uses its own LOCAL_SLURM_2411_DIR under tmp_path, so neither shared Slurm is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from campaign_helpers import wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "tools" / "local-slurm.sh"
UNREACHABLE = "http://127.0.0.1:9/debian"  # the discard port: nothing answers

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="tools/local-slurm.sh runs as root")


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_SLURM")}
    env.update(LOCAL_SLURM_VERSION="24.11", LOCAL_SLURM_2411_DIR=str(state))
    env.update(extra)
    return env


def _run(state: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=_env(state, **extra))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@needs_root
def test_config_is_the_22_05_generator_with_its_own_ports_names_and_device_files(tmp_path):
    old, new = tmp_path / "2205", tmp_path / "2411"
    env_2205 = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_SLURM")}
    env_2205.update(LOCAL_SLURM_DIR=str(old), LOCAL_SLURM_GPUS="fake")
    subprocess.run([str(SCRIPT), "config"], check=True, capture_output=True, env=env_2205, timeout=60)
    assert _run(new, "config").returncode == 0

    def conf(state: Path) -> dict[str, str]:
        text = (state / "etc/slurm.conf").read_text().replace(str(state), "STATE")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))

    a, b = conf(old), conf(new)
    moved = {
        "ClusterName": "local2411",
        "SlurmctldPort": "6917",
        "SlurmdPort": "6918",
        "AccountingStoragePort": "6919",
        "FirstJobId": "24110001",
    }
    assert {k: b[k] for k in moved} == moved
    assert {k: v for k, v in a.items() if k not in moved} == {k: v for k, v in b.items() if k not in moved}
    assert "DbdPort=6919" in (new / "etc/slurmdbd.conf").read_text()
    assert "port=3308" in (new / "etc/my.cnf").read_text()
    # The same 16 fake GPUs: File= symlinks to /dev/null, which 24.11 takes too (only a GPU
    # without File= is dropped, on both).
    gres = [
        (state / "gres.conf").read_text().replace(str(state.parent), "STATE") for state in (old / "etc", new / "etc")
    ]
    assert gres[0].replace("2205", "X") == gres[1].replace("2411", "X")
    assert sorted(p.name for p in (new / "dev").iterdir()) == [f"nvidia{i}" for i in sorted(range(16), key=str)]
    assert all(os.readlink(p) == "/dev/null" for p in (new / "dev").iterdir())


@needs_root
def test_a_state_dir_of_another_slurm_is_refused_with_one_line(tmp_path):
    state = tmp_path / "state"
    (state / "etc").mkdir(parents=True)
    (state / "etc/slurm.conf").write_text("ClusterName=local\n")
    result = _run(state, "start")
    assert result.returncode == 1
    assert _lines(result.stderr) == [
        f"[local-slurm] ERROR: {state} holds another Slurm's state (no version file saying 24.11); set LOCAL_SLURM_2411_DIR"
    ]


def test_an_unknown_version_is_refused_with_one_line(tmp_path):
    result = _run(tmp_path, "status", LOCAL_SLURM_VERSION="23.02")
    assert result.returncode == 2
    assert _lines(result.stderr) == ["[local-slurm] ERROR: LOCAL_SLURM_VERSION=23.02: 22.05 or 24.11"]


@needs_root
def test_start_without_the_space_for_the_root_fails_with_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    # A 50 MB tmpfs as the state dir, mounted in a mount namespace of its own (the host sees nothing).
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs -o size=50m tmpfs "$1" && exec "$2" start',
            "sh",
            str(state),
            str(SCRIPT),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(state),
    )
    assert result.returncode == 1
    assert _lines(result.stderr) == [
        f"[local-slurm] ERROR: only 50 MB free under {state}; Slurm 24.11's root needs 1500 MB"
    ]


@needs_root
@pytest.mark.slow
def test_start_with_the_archive_unreachable_fails_with_one_line_and_the_tests_fail_under_require_slurm(tmp_path):
    state = tmp_path / "state"
    result = _run(state, "start", LOCAL_SLURM_2411_MIRROR=UNREACHABLE)
    assert result.returncode == 1, result.stderr
    assert _lines(result.stderr)[-1].startswith(f"[local-slurm] ERROR: debootstrap trixie from {UNREACHABLE} failed")
    assert len([line for line in _lines(result.stderr) if "ERROR" in line]) == 1

    def pytest_24_11(**extra: str) -> subprocess.CompletedProcess[str]:
        env = _env(state, LOCAL_SLURM_2411_MIRROR=UNREACHABLE)
        env.pop("REQUIRE_SLURM", None)
        env.update(extra)
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "slurm2411",
                "--basetemp",
                str(tmp_path / "inner"),
                "tests/test_report_slurm.py",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    required = pytest_24_11(REQUIRE_SLURM="1")
    assert required.returncode == 1, required.stdout
    assert "REQUIRE_SLURM=1 but local Slurm 24.11 is unavailable" in required.stdout
    assert "archive unreachable?" in required.stdout
    optional = pytest_24_11()
    assert optional.returncode == 0 and "1 skipped" in optional.stdout, optional.stdout


@pytest.mark.slurm
@pytest.mark.slurm2411
@pytest.mark.slurm_exclusive
def test_start_names_a_venv_whose_python_cannot_run_in_the_root(local_slurm, tmp_path):
    """Jobs run the checkout's .venv/bin/python in the Debian 13 root: one made from Debian
    12's /usr/bin/python3.11 cannot, and `start` says so (the running Slurm is left as it is)."""
    if local_slurm.version != "24.11":
        pytest.skip("about Slurm 24.11's root")
    if not Path("/usr/bin/python3.11").exists():
        pytest.skip("no Debian 12 /usr/bin/python3.11 here")
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    for name in ("local-slurm.sh", "local-slurm-root.sh"):
        (checkout / "tools" / name).write_bytes((SCRIPT.parent / name).read_bytes())
        (checkout / "tools" / name).chmod(0o755)
    subprocess.run(["/usr/bin/python3.11", "-m", "venv", "--without-pip", str(checkout / ".venv")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_SLURM_2411_DIR", "LOCAL_SLURM_DIR")}
    result = subprocess.run(
        [str(checkout / "tools/local-slurm.sh"), "start"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env, LOCAL_SLURM_VERSION="24.11", LOCAL_SLURM_2411_DIR=str(local_slurm.state_dir)),
    )
    assert result.returncode == 1
    assert _lines(result.stderr)[-1].startswith(
        f"[local-slurm] ERROR: {checkout}/.venv/bin/python (/usr/bin/python3.11) does not run in the Debian 13 root"
    ), result.stderr


@pytest.mark.slurm
@pytest.mark.slurm2411
@pytest.mark.slurm_exclusive
def test_a_checkout_outside_the_bound_folders_runs_jobs_after_the_daemons_died(local_slurm, tmp_path):
    """A session's end kills the daemons but leaves the root's namespace (a mount on the host),
    made from another checkout; CI then starts Slurm from a fresh clone elsewhere. That clone's
    folder must be bound into the old namespace, or every command run from it fails; and a
    clone made again at the same path (a new folder where the bound one was deleted) too."""
    if local_slurm.version != "24.11":
        pytest.skip("about Slurm 24.11's root")
    checkout = Path(tempfile.mkdtemp(prefix="throughput-checkout-", dir="/srv"))
    root = local_slurm.state_dir / "root"
    try:
        (checkout / "tools").mkdir()
        for name in ("local-slurm.sh", "local-slurm-root.sh"):
            shutil.copy2(SCRIPT.parent / name, checkout / "tools" / name)
        killed = []
        for pidfile in (*(local_slurm.state_dir / "run").glob("*.pid"), local_slurm.state_dir / "mysql-run/mysqld.pid"):
            if pidfile.is_file() and pidfile.read_text().strip().isdigit():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
                    killed.append(int(pidfile.read_text()))
        wait_for(lambda: not any(_alive(pid) for pid in killed), 30, "the killed daemons to be gone")
        env = dict(os.environ, LOCAL_SLURM_VERSION="24.11", LOCAL_SLURM_2411_DIR=str(local_slurm.state_dir))
        for again in (False, True):
            if again:  # the same path, a new folder: the namespace's bind is of a deleted one
                shutil.move(checkout / "tools", tmp_path / "tools")
                shutil.rmtree(checkout)
                checkout.mkdir()
                shutil.move(tmp_path / "tools", checkout / "tools")
            _start_and_run_a_job_in(checkout, env, local_slurm)
    finally:
        ns = str(local_slurm.state_dir / "ns/mnt")
        subprocess.run(["nsenter", f"--mount={ns}", "--", "umount", "-l", f"{root}{checkout}"], capture_output=True)
        shutil.rmtree(checkout, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_and_run_a_job_in(checkout: Path, env: dict[str, str], local_slurm) -> None:
    started = subprocess.run(
        [str(checkout / "tools/local-slurm.sh"), "start"], capture_output=True, text=True, timeout=300, env=env
    )
    assert started.returncode == 0, started.stderr
    job = subprocess.run(
        ["sbatch", "--parsable", "--wait", "-A", local_slurm.account, "-p", local_slurm.partition,
         "-c", "1", "--mem=100M", "-t", "1", "-o", "pwd.out", "--wrap", "pwd"],
        cwd=checkout, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    assert (checkout / "pwd.out").read_text().strip() == str(checkout)
