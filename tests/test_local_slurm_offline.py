"""tools/local-slurm.sh without starting daemons: the GPU declaration, the offline unpacking, `env`.

Every test uses its own LOCAL_SLURM_DIR under tmp_path, so the shared local Slurm of the
other tests (its state dir, /etc/slurm) is never touched. The daemons themselves are started
only on the GPU machine (tools/h200.sh slurm-check; docs/slurm-on-h200.md).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "tools" / "local-slurm.sh"
DEBS = REPO_ROOT / ".slurm-debs"

# Two GPUs whose minor numbers run against nvidia-smi's index order, as nvidia-smi prints them.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
-L) printf 'GPU 0: NVIDIA H200 (UUID: GPU-aaa)\\nGPU 1: NVIDIA H200 (UUID: GPU-bbb)\\n' ;;
-q) printf 'GPU 00000000:00:07.0\\n    Minor Number                          : 1\\n'
    printf 'GPU 00000000:00:06.0\\n    Minor Number                          : 0\\n' ;;
esac
"""


def _run(state_dir: Path, *args: str, path_prefix: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_SLURM_")}
    full_env.update(env, LOCAL_SLURM_DIR=str(state_dir))
    if path_prefix is not None:
        full_env["PATH"] = f"{path_prefix}:{full_env['PATH']}"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=120, check=False)


@pytest.fixture
def fake_gpus(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    return bin_dir


def _conf(state_dir: Path, name: str) -> str:
    return (state_dir / "etc" / name).read_text()


def _node_line(slurm_conf: str) -> str:
    return next(line for line in slurm_conf.splitlines() if line.startswith("NodeName="))


def test_fake_gpus_stay_sixteen_for_the_test_suite(tmp_path):
    state = tmp_path / "state"
    result = _run(state, "config", LOCAL_SLURM_GPUS="fake")
    assert result.returncode == 0, result.stderr
    slurm_conf = _conf(state, "slurm.conf")
    assert "CPUs=128 RealMemory=1048576 Gres=gpu:16" in _node_line(slurm_conf)
    assert _conf(state, "gres.conf").strip().endswith(f"File={state}/dev/nvidia[0-15]")
    assert "ConstrainDevices=no" in _conf(state, "cgroup.conf")
    assert "PluginDir" not in slurm_conf  # online: the packages' own paths


@pytest.mark.parametrize("cgroup", ["v1", "v2"])
def test_real_gpus_are_declared_from_nvidia_smi_with_their_device_files(tmp_path, fake_gpus, cgroup):
    state = tmp_path / "state"
    result = _run(state, "config", path_prefix=fake_gpus, LOCAL_SLURM_CGROUP=cgroup)
    assert result.returncode == 0, result.stderr
    # One 8-CPU, 64 GiB, 1-GPU job per GPU: two GPUs, so 16 CPUs and 128 GiB.
    assert "CPUs=16 RealMemory=131072 Gres=gpu:2 " in _node_line(_conf(state, "slurm.conf"))
    # In nvidia-smi's index order, each GPU with the device file of its minor number.
    node = _node_line(_conf(state, "slurm.conf")).split()[0].removeprefix("NodeName=")
    assert _conf(state, "gres.conf").splitlines() == [
        f"NodeName={node} Name=gpu File=/dev/nvidia1",
        f"NodeName={node} Name=gpu File=/dev/nvidia0",
    ]
    cgroup_conf = _conf(state, "cgroup.conf")
    assert f"CgroupPlugin=cgroup/{cgroup}" in cgroup_conf
    assert "ConstrainDevices=yes" in cgroup_conf  # Slurm itself binds one GPU per job
    assert ("IgnoreSystemd=yes" in cgroup_conf) == (cgroup == "v2")
    slurm_conf = _conf(state, "slurm.conf")
    assert "TaskPlugin=task/cgroup" in slurm_conf and "ProctrackType=proctrack/cgroup" in slurm_conf


def test_real_gpus_without_cgroups_fall_back_to_cuda_visible_devices(tmp_path, fake_gpus):
    state = tmp_path / "state"
    result = _run(state, "config", path_prefix=fake_gpus, LOCAL_SLURM_CGROUP="none")
    assert result.returncode == 0, result.stderr
    slurm_conf = _conf(state, "slurm.conf")
    assert "ProctrackType=proctrack/linuxproc" in slurm_conf
    assert "TaskPlugin=task/none" in slurm_conf
    assert "Gres=gpu:2 " in _node_line(slurm_conf)
    cgroup_conf = state / "etc" / "cgroup.conf"
    assert not cgroup_conf.exists() or "ConstrainDevices=no" in cgroup_conf.read_text()


def test_config_refuses_a_state_dir_that_is_running(tmp_path):
    state = tmp_path / "state"
    (state / "run").mkdir(parents=True)
    (state / "run" / "slurmctld.pid").write_text(f"{os.getpid()}\n")  # a live pid
    result = _run(state, "config", LOCAL_SLURM_GPUS="fake")
    assert result.returncode == 1
    assert "not running" in result.stderr
    assert not (state / "etc" / "slurm.conf").exists()


def test_env_online_prints_only_the_config(tmp_path):
    state = tmp_path / "state"
    result = _run(state, "env")
    assert result.returncode == 0, result.stderr
    expected = [f"export LOCAL_SLURM_DIR={state}", f"export SLURM_CONF={state}/etc/slurm.conf"]
    assert result.stdout.splitlines() == expected


def test_unpack_without_debs_says_how_to_get_them(tmp_path):
    result = _run(tmp_path / "state", "unpack", "--offline", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "tools/fetch-slurm-debs.sh" in result.stderr


@pytest.mark.skipif(not any(DEBS.glob("slurmd_*.deb")), reason="no .slurm-debs/ (tools/fetch-slurm-debs.sh)")
def test_unpack_links_the_commands_and_env_exports_them(tmp_path, fake_gpus):
    state = tmp_path / "state"
    result = _run(state, "unpack", "--offline", str(DEBS))
    assert result.returncode == 0, result.stderr
    assert "ldd: every library" in result.stderr and "22.05" in result.stderr
    bin_dir = state / "offline" / "bin"
    clients = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo")
    for name in (*clients, "slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd"):
        assert (bin_dir / name).exists(), name
    # Debian's step daemon runs under its plain name: Slurm picks the daemon's role by it.
    assert "exec -a slurmstepd" in (bin_dir / "slurmstepd").read_text()

    # Unpacked once: later calls find the tree without the variable, and env exports it.
    env_lines = _run(state, "env").stdout.splitlines()
    assert f"export PATH={bin_dir}${{PATH:+:$PATH}}" in env_lines
    libs = f"export LD_LIBRARY_PATH={state}/offline/root/usr/lib/x86_64-linux-gnu/slurm-wlm:"
    assert any(line.startswith(libs) for line in env_lines)
    # Offline, slurm.conf, slurmdbd.conf and my.cnf point at the unpacked files.
    assert _run(state, "config", path_prefix=fake_gpus, LOCAL_SLURM_CGROUP="v2").returncode == 0
    plugin_dir = f"PluginDir={state}/offline/root/usr/lib/x86_64-linux-gnu/slurm-wlm"
    assert plugin_dir in _conf(state, "slurm.conf")
    assert plugin_dir in _conf(state, "slurmdbd.conf")
    assert f"basedir={state}/offline/root/usr" in _conf(state, "my.cnf")

    # A clean shell finds the unpacked clients by name after eval "$(local-slurm.sh env)".
    out = subprocess.run(
        ["bash", "-c", f'eval "$({SCRIPT} env)"; command -v sbatch; sbatch --version'],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LOCAL_SLURM_DIR": str(state)}, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(bin_dir / "sbatch"), "slurm-wlm 22.05.8"]
