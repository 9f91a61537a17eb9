"""Hardware and software metadata, and the dense BF16 peak used for MFU (its table
lives in `throughput_schema.gpus`, which the audit's roofline check reads too)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from typing import TYPE_CHECKING

from throughput_schema import Hardware
from throughput_schema.gpus import GIB, PEAK_BF16, peak_bf16_flops  # noqa: F401  (the worker's callers and benchmarks)

if TYPE_CHECKING:  # torch is imported where it is used, so the peak table stays torch-free
    import torch


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


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """BF16 wherever the hardware multiplies BF16 natively, else None (FP32, no autocast).

    On a CPU without AVX512-BF16 or AMX, PyTorch's BF16 matmul is a fallback far slower than
    FP32 (docs/performance.md), enough to turn the CPU quick start from minutes into a quarter
    of an hour. The CPU is for trying the tool and for tests, never for the GPU figures, so it
    runs FP32 there and the backend says so."""
    import torch

    if device.type != "cpu":
        return torch.bfloat16
    try:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: assume the fallback
        native = False
    return torch.bfloat16 if native else None
