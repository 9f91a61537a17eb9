"""GPU test: NVML's energy counter of the worker's GPU rises around a matmul loop.

Skipped without CUDA. Run with: pytest packages/tiny-llm/tests -m cuda -k energy
"""

import time

import pytest
import torch

from throughput_schema.energy import COUNTER_NVML, derive_window
from tiny_llm.energy_meter import open_meter

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_nvml_counter_rises_around_a_matmul_loop():
    device = torch.device("cuda", torch.cuda.current_device())
    meter, reason = open_meter(device)
    assert meter is not None, reason
    source = meter.source()
    assert source.counter == COUNTER_NVML and source.device_name
    limit = meter.power_limit_watts()
    assert limit is not None and limit > 0

    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start, t0 = meter.read(), time.perf_counter()
    for _ in range(400):  # about 2 s of BF16 matmuls on an H200
        a @ b
    torch.cuda.synchronize()
    end, t1 = meter.read(), time.perf_counter()
    window = derive_window(start, end, t1 - t0, 400 * 8192)
    assert end > start, (start, end)
    # Busy, below the limit (plus 5%): an idle H200 reads about 120 W.
    assert 150 < window.mean_watts <= 1.05 * limit, (window.mean_watts, limit)
    print(
        f"{source.device_name} (NVML index {source.device_index}, covers {source.covers or 'not said'}): "
        f"{window.joules:.0f} J over {window.interval_seconds:.2f} s, {window.mean_watts:.0f} W, limit {limit:.0f} W"
    )


def test_worker_records_energy_with_optimizer_timing(tmp_path):
    """A small point with --optimizer-timing: every window read over its bursts' span, setup read too."""
    import subprocess
    import sys
    from pathlib import Path

    from throughput_schema import WorkerResult, read

    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "result.json"
    sets = ["model.context_length=256", "training.micro_batch_size=4", "training.batch_tokens=1024", "model.n_layers=4"]
    proc = subprocess.run(
        [sys.executable, "-m", "tiny_llm", "benchmark-throughput-worker", "--config", str(root / "configs/20m.yaml")]
        + [x for s in sets for x in ("--set", s)]
        + ["--output", str(out), "--warmup", "5", "--windows", "3", "--window-seconds", "0.5", "--optimizer-timing"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = read(out, WorkerResult)
    e = r.energy
    assert e is not None, r.energy_unavailable
    assert e.interval == "span" and e.setup_joules is not None and e.setup_joules > 0
    assert all(w.energy is not None and w.energy.interval_seconds >= w.seconds for w in r.windows)
    assert all(0 < w.energy.mean_watts <= 1.05 * e.power_limit_watts for w in r.windows)
    assert "J/token" in proc.stdout and "W mean over the bursts' span" in proc.stdout
