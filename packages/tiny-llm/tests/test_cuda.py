"""GPU tests (H200): graph replay vs eager, OOM outcome, the guide's command (docs/guide.md), optimizer timing.

Skipped without CUDA. Run with: pytest packages/tiny-llm/tests -m cuda
"""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from throughput_schema import EXIT_CODES, WorkerResult, outcome_kind, read
from throughput_schema.layout import decode_bursts
from throughput_schema.recipe import load_recipe

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[3]
CUDA = torch.device("cuda")


def small_recipe(batch=4, context=256):
    return load_recipe(
        ROOT / "configs" / "20m.yaml",
        [
            f"model.context_length={context}",
            f"training.micro_batch_size={batch}",
            f"training.batch_tokens={batch * context}",
            "model.n_layers=4",
        ],
    )


def worker(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "tiny_llm", "benchmark-throughput-worker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_graph_replay_matches_eager_update():
    """The captured compiled update and the eager update agree on loss and weights after several steps."""
    from tiny_llm.update import build

    recipe = small_recipe()
    graphed = build(recipe, CUDA)  # compile + 3 eager updates + capture
    eager = build(recipe, CUDA, compile_model=False, use_graph=False)
    for _ in range(graphed.setup_updates):
        eager.run()
    losses_g, losses_e = [], []
    for _ in range(6):
        graphed.run()
        eager.run()
        losses_g.append(graphed.update.loss.item())
        losses_e.append(eager.update.loss.item())
    assert graphed.backend == "cuda-graph" and eager.backend == "cuda-eager"
    torch.testing.assert_close(torch.tensor(losses_g), torch.tensor(losses_e), rtol=2e-2, atol=2e-2)
    # Weights: compiled (fused BF16) and eager kernels round differently, and Adam's
    # normalised steps amplify that for near-zero gradients, so compare norms: the
    # difference must be small against how far the weights moved from their init.
    init = build(recipe, CUDA, compile_model=False, use_graph=False).optimizer.params
    diff = (graphed.optimizer.params - eager.optimizer.params).norm().item()
    moved = (eager.optimizer.params - init).norm().item()
    print(f"loss graph {losses_g} eager {losses_e}; weight diff {diff:.3e} vs moved {moved:.3e}")
    assert moved > 0 and diff < 0.25 * moved, (diff, moved)
    g, e = graphed.optimizer.metrics(), eager.optimizer.metrics()
    assert g["updates"] == e["updates"] == graphed.setup_updates + 6 and g["finite"] and e["finite"]
    assert abs(g["grad_norm"] - e["grad_norm"]) < 0.05 * e["grad_norm"]


@pytest.mark.parametrize("kernel", ["fused", "compiled"])
def test_fast_arena_kernels_match_tensor_path(kernel):
    """On CUDA, torch._fused_adamw_ over the arena, and the tensor step through inductor,
    equal the pure-tensor path (FP32)."""
    from tiny_llm.arena_adamw import ArenaAdamW
    from tiny_llm.model import build_model

    recipe = small_recipe()
    a = build_model(recipe.model, CUDA)
    b = copy.deepcopy(a)
    fa = ArenaAdamW(a, kernel=kernel)
    fb = ArenaAdamW(b, kernel="tensor")
    gen = torch.Generator(device=CUDA).manual_seed(0)
    for i in range(10):
        g = torch.randn(fa.numel, device=CUDA, generator=gen) * (0.02 if i % 2 else 1.0)
        for opt in (fa, fb):
            opt.grads.copy_(g)  # padding included: both paths see the same arena
            opt.step()
    torch.testing.assert_close(fa.params, fb.params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fa.exp_avg_sq, fb.exp_avg_sq, rtol=1e-5, atol=1e-9)
    # A NaN is skipped by the fused kernel too, without a host sync.
    fa.grads[5] = float("nan")
    before = fa.params.clone()
    fa.step()
    assert torch.equal(before, fa.params) and not fa.metrics()["finite"]


def test_too_large_batch_is_cuda_oom(tmp_path):
    out = tmp_path / "oom.json"
    proc = worker(
        "--config",
        "configs/500m.yaml",
        "--set",
        "model.context_length=4096",
        "--set",
        "training.micro_batch_size=512",
        "--set",
        "training.batch_tokens=2097152",
        "--output",
        str(out),
        "--warmup",
        "1",
        "--windows",
        "1",
        "--window-seconds",
        "0.1",
    )
    assert proc.returncode == EXIT_CODES["cuda_oom"], proc.stdout + proc.stderr
    result = read(out, WorkerResult)
    assert outcome_kind(result.outcome) == "cuda_oom" and result.exit_code == 3
    assert result.outcome.phase in ("setup", "compile", "capture", "warmup", "measurement")
    assert result.hardware.gpu_name and result.memory is not None


def test_guide_command_completes(tmp_path):
    out = tmp_path / "throughput-point.json"
    proc = worker(
        "--config",
        "configs/250m.yaml",
        "--set",
        "model.context_length=2048",
        "--set",
        "training.micro_batch_size=8",
        "--set",
        "training.batch_tokens=16384",
        "--set",
        "optimizer.lr=0.001",
        "--set",
        "optimizer.beta2=0.99",
        "--output",
        str(out),
        "--warmup",
        "20",
        "--windows",
        "5",
        "--window-seconds",
        "10",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = read(out, WorkerResult)
    assert result.backend == "cuda-graph" and len(result.windows) in (5, 10)
    assert result.throughput.tokens_per_second > 0 and result.memory.measurement is not None
    # The record names the physical GPU as nvidia-smi does.
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.split()
    assert result.hardware.gpu_uuid.startswith("GPU-") and result.hardware.gpu_uuid in listed
    print(proc.stdout)


def test_optimizer_timing_sanity(tmp_path):
    out = tmp_path / "timing.json"
    proc = worker(
        "--config",
        "configs/20m.yaml",
        "--set",
        "model.context_length=512",
        "--set",
        "training.micro_batch_size=8",
        "--set",
        "training.batch_tokens=4096",
        "--output",
        str(out),
        "--warmup",
        "5",
        "--windows",
        "5",
        "--window-seconds",
        "1",
        "--optimizer-timing",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = read(out, WorkerResult)
    t = r.optimizer_timing
    assert r.mode == "optimizer-timing" and t is not None and t.bursts
    assert 0 < t.optimizer_ms < min(t.window_graph_ms)
    assert 0 < t.share_of_graph < 1 and 0 < t.share_of_wall < 1
    # Every window's updates are covered by its bursts.
    for i, w in enumerate(r.windows):
        assert sum(b.updates for b in t.bursts if b.window == i) == w.updates
    assert t.separate_step_ms is not None and t.separate_step_ms > 0
    # The raw burst samples beside the result: <stem>.bursts.jsonl (the output is not result.json).
    assert decode_bursts((tmp_path / "timing.bursts.jsonl").read_bytes()) == t.bursts
    print(proc.stdout)
