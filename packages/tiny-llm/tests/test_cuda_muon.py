"""GPU tests of Muon inside the complete update: the captured graph equals the eager path, and
200 updates of the synthetic protocol lower the loss as AdamW's do.

Skipped without CUDA; the CPU tests (`test_arena_muon.py`, `test_muon_worker.py`) cover the
same arithmetic. Run with: pytest packages/tiny-llm/tests/test_cuda_muon.py -m cuda
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from throughput_schema.recipe import load_recipe

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[3]
CUDA = torch.device("cuda")


def recipe(optimizer: str, batch: int = 4, context: int = 256):
    return load_recipe(
        ROOT / "configs" / "20m.yaml",
        [
            f"optimizer.name={optimizer}",
            f"model.context_length={context}",
            f"training.micro_batch_size={batch}",
            f"training.batch_tokens={batch * context}",
            "model.n_layers=4",
        ],
    )


def test_muon_in_the_captured_update_equals_the_eager_update():
    """The same model uncompiled both ways, so only the capture differs: the graph replays the
    eager update's kernels, Muon's Newton-Schulz and the momentum among them."""
    from tiny_llm.arena_muon import ArenaMuon
    from tiny_llm.update import build

    r = recipe("muon")
    graphed = build(r, CUDA, compile_model=False, use_graph=True)
    eager = build(r, CUDA, compile_model=False, use_graph=False)
    assert isinstance(graphed.optimizer, ArenaMuon) and graphed.backend == "cuda-graph"
    for _ in range(graphed.setup_updates):
        eager.run()
    for _ in range(6):
        graphed.run()
        eager.run()
        torch.testing.assert_close(graphed.update.loss, eager.update.loss, rtol=1e-5, atol=1e-5)
    torch.cuda.synchronize()
    for mine, theirs in ((graphed.optimizer.params, eager.optimizer.params),
                         (graphed.optimizer.adamw.params, eager.optimizer.adamw.params)):  # fmt: skip
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    momenta = [(g.momentum, e.momentum) for g, e in zip(graphed.optimizer.groups, eager.optimizer.groups)]
    for mine, theirs in momenta:
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    assert graphed.optimizer.metrics()["updates"] == graphed.setup_updates + 6
    assert bool(graphed.optimizer.state_is_finite())


def test_200_captured_updates_with_muon_lower_the_loss_as_adamws_do():
    from tiny_llm.update import build

    tails = {}
    for name in ("adamw", "muon"):
        built = build(recipe(name), CUDA)  # compiled and captured: the worker's update
        losses = []
        for _ in range(200 - built.setup_updates):
            built.run()
            losses.append(built.update.loss.item())
        tails[name] = (losses[0], sum(losses[-20:]) / 20)
    (first_a, tail_a), (first_m, tail_m) = tails["adamw"], tails["muon"]
    print(f"first and last-20 mean loss: adamw {first_a:.3f} {tail_a:.3f}, muon {first_m:.3f} {tail_m:.3f}")
    assert tail_a < 0.5 * first_a
    assert tail_m < 0.5 * first_m and tail_m <= 1.1 * tail_a
