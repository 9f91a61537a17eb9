"""The datasheet dense BF16 peak of the GPUs this project knows: the one table behind the
worker's MFU and the audit's roofline check.

A peak is looked up by the exact device name AND its memory size, because one marketing
name can cover parts with different clocks and power limits; anything not in the table
(CPUs, unknown GPUs) gets no peak rather than a guess.
"""

from __future__ import annotations

GIB = 1024**3

# (exact torch device name, memory range in GiB as torch reports it, dense BF16 FLOP/s).
# Sources: NVIDIA's datasheets, which print BF16 Tensor Core figures "with sparsity";
# the dense peak is half of that. H100 Tensor Core GPU datasheet: SXM 1,979, PCIe 1,513,
# NVL 1,671 TFLOPS with sparsity. H200 datasheet: SXM 1,979, NVL 1,671. GH200 Grace Hopper
# Superchip datasheet: 1,979 (the same Hopper GPU as H100 SXM). A100 Tensor Core GPU
# datasheet: 312 TFLOPS dense (624 with sparsity) for every A100, SXM4 and PCIe, 40 and 80 GB.
PEAK_BF16: list[tuple[str, tuple[float, float], float]] = [
    ("NVIDIA H100 80GB HBM3", (75.0, 81.0), 989e12),  # H100 SXM5 80 GB (79.1 GiB visible)
    ("NVIDIA H100 PCIe", (75.0, 81.0), 756e12),  # H100 PCIe 80 GB
    ("NVIDIA H100 NVL", (88.0, 95.0), 835e12),  # H100 NVL 94 GB
    ("NVIDIA H200", (135.0, 142.0), 989e12),  # H200 SXM 141 GB (140.4 GiB visible)
    ("NVIDIA H200 NVL", (135.0, 142.0), 835e12),  # H200 NVL 141 GB
    ("NVIDIA GH200 480GB", (90.0, 97.0), 989e12),  # GH200 with 96 GB HBM3
    ("NVIDIA GH200 144G HBM3e", (135.0, 145.0), 989e12),  # GH200 with 144 GB HBM3e
    ("NVIDIA A100-SXM4-40GB", (38.0, 41.0), 312e12),
    ("NVIDIA A100-SXM4-80GB", (75.0, 81.0), 312e12),
    ("NVIDIA A100-PCIE-40GB", (38.0, 41.0), 312e12),
    ("NVIDIA A100 80GB PCIe", (75.0, 81.0), 312e12),
]


def peak_bf16_flops(name: str, memory_bytes: int) -> float | None:
    gib = memory_bytes / GIB
    for known, (lo, hi), peak in PEAK_BF16:
        if name == known and lo <= gib <= hi:
            return peak
    return None
