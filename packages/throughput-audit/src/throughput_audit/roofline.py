"""The roofline plausibility check: no window may claim more FLOP/s than its GPU can do.

Every other check compares a figure with the raw numbers it came from; a campaign whose
windows were all written consistently, but faster than the hardware, passes them all.
This one compares the fastest window with the datasheet's dense BF16 peak of the GPU the
result names (its dense FP8 peak for an FP8 point, whose BF16-equivalent FLOP/s may pass the
BF16 one) (`throughput_schema.gpus`, the table behind the worker's MFU), and the peak
the result's MFU was computed with against the same table. A GPU the
table does not know is not applicable, never a failure: a guessed peak would fail real
figures or pass impossible ones.
"""

from __future__ import annotations

from throughput_audit.findings import Checks
from throughput_schema import WorkerResult
from throughput_schema.gpus import peak_bf16_flops
from throughput_schema.precision import is_fp8, peak_fp8_flops


def check_roofline(checks: Checks, file: str, result: WorkerResult, fastest_rate: float, flops_per_token: int) -> None:
    hw = result.hardware
    peak = peak_bf16_flops(hw.gpu_name, hw.gpu_memory_bytes)
    if peak is None:
        gpu = f"GPU {hw.gpu_name!r} with {hw.gpu_memory_bytes / 2**30:.1f} GiB" if hw.gpu_name else "no GPU recorded"
        checks.not_applicable(
            "throughput.roofline", f"{file}: {gpu}: no datasheet BF16 peak known, roofline not checked", file
        )
        return
    recorded = result.throughput.peak_flops if result.throughput else None
    if recorded:
        # The MFU a result reports divides by this peak: a larger one would shrink it unseen.
        checks.expect(
            "throughput.peak_flops",
            recorded == peak,
            file,
            f"{file}: MFU peak {recorded / 1e12:,.1f} TFLOP/s recorded, the {hw.gpu_name} datasheet says "
            f"{peak / 1e12:,.1f}",
            recorded=recorded,
            datasheet=peak,
        )
    implied = flops_per_token * fastest_rate
    precision = result.recipe.training.precision
    fp8_peak = peak_fp8_flops(hw.gpu_name, hw.gpu_memory_bytes) if is_fp8(precision) else None
    ceiling, which = (fp8_peak, "FP8") if fp8_peak else (peak, "BF16")
    checks.expect(
        "throughput.roofline",
        implied <= ceiling,
        file,
        f"{file}: fastest window {fastest_rate:,.0f} tok/s x {flops_per_token:,} FLOP/token = "
        f"{implied / 1e12:,.1f} TFLOP/s, {'within' if implied <= ceiling else 'above'} the {hw.gpu_name} "
        f"dense {which} peak {ceiling / 1e12:,.0f} TFLOP/s",
        implied_flops=implied,
        peak_flops=peak,
        share_of_peak=implied / peak,
    )
