"""Hardware and software metadata, and the dense BF16 peak used for MFU.

The peak is looked up by the exact device name AND its memory size, because one
marketing name can cover parts with different clocks and power limits; anything
not in the table (CPUs, PCIe/NVL parts, unknown GPUs) gets no peak and no MFU
rather than a guess.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from typing import TYPE_CHECKING

from throughput_schema import Hardware

if TYPE_CHECKING:  # torch is imported where it is used, so the peak table stays torch-free
    import torch

GIB = 1024**3

# (exact torch device name, memory range in GiB as torch reports it, dense BF16 FLOP/s).
# Datasheet figures without sparsity; H100 SXM, H200 SXM and GH200 share Hopper's 989 TFLOP/s.
PEAK_BF16: list[tuple[str, tuple[float, float], float]] = [
    ("NVIDIA H100 80GB HBM3", (75.0, 81.0), 989e12),  # H100 SXM5 80 GB (79.1 GiB visible)
    ("NVIDIA H200", (135.0, 142.0), 989e12),  # H200 SXM 141 GB (140.4 GiB visible)
    ("NVIDIA GH200 480GB", (90.0, 97.0), 989e12),  # GH200 with 96 GB HBM3
    ("NVIDIA GH200 144G HBM3e", (135.0, 145.0), 989e12),  # GH200 with 144 GB HBM3e
]


def peak_bf16_flops(name: str, memory_bytes: int) -> float | None:
    gib = memory_bytes / GIB
    for known, (lo, hi), peak in PEAK_BF16:
        if name == known and lo <= gib <= hi:
            return peak
    return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def collect(device: torch.device) -> Hardware:
    import torch

    gpu_name, gpu_memory, gpu_count, gpu_uuid, driver = "", 0, 0, "", ""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu_name, gpu_memory, gpu_count = props.name, int(props.total_memory), torch.cuda.device_count()
        gpu_uuid = f"GPU-{props.uuid}" if getattr(props, "uuid", None) else ""
        driver = _driver_version()
    return Hardware(
        gpu_name=gpu_name,
        gpu_memory_bytes=gpu_memory,
        gpu_count=gpu_count,
        gpu_uuid=gpu_uuid,
        driver=driver,
        cuda=torch.version.cuda or "",
        torch=str(torch.__version__),
        triton=_version("triton") or _version("pytorch-triton"),
        python=platform.python_version(),
        hostname=socket.gethostname(),
        cpu=_cpu_name(),
        cpu_count=os.cpu_count() or 0,
        platform=platform.platform(),
    )
