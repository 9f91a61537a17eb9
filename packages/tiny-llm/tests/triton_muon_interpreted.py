"""ArenaMuon's "triton" element-wise passes in Triton's interpreter on CPU tensors, against
its "tensor" ones.

Run by test_arena_muon.py in a fresh process with TRITON_INTERPRET=1 (Triton reads it when
the kernels are defined). Newton-Schulz runs in FP32 here, so both sides orthogonalise the
same stack (the interpreter's BF16 stores round towards zero, CUDA's to nearest). Exits
non-zero on the first failed check.
"""

import copy
from pathlib import Path

import torch

from throughput_schema import OptimizerConfig
from throughput_schema.recipe import load_recipe
from tiny_llm.arena_muon import ArenaMuon
from tiny_llm.model import build_model
from tiny_llm.triton_muon import interpreted

ROOT = Path(__file__).resolve().parents[3]


def twins(max_norm, nesterov=True):
    # one kv head: q and proj, k and v are two runs each, so a group spans several launches
    overrides = ["model.vocab_size=64", "model.n_layers=2", "model.n_kv_heads=1"]
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", overrides)
    a = build_model(recipe.model, torch.device("cpu"), seed=0)
    b = copy.deepcopy(a)
    config = OptimizerConfig(name="muon", lr=1e-2, weight_decay=0.1, muon_nesterov=nesterov)
    kw = dict(max_norm=max_norm, ns_dtype=torch.float32)
    ref = ArenaMuon(a, config, elementwise="tensor", **kw)
    tri = ArenaMuon(b, config, elementwise="triton", **kw)
    assert max(len(g.runs) for g in tri.groups) > 1
    return (a, ref), (b, tri)


def step_both(pairs, grads):
    for model, opt in pairs:
        opt.zero_grad()
        for p, g in zip(model.parameters(), grads):
            p.grad.copy_(g)
        opt.step()


def check_close(ref, tri):
    torch.testing.assert_close(tri.params, ref.params, rtol=1e-5, atol=1e-6)
    for r, t in zip(ref.groups, tri.groups):
        torch.testing.assert_close(t.momentum, r.momentum, rtol=1e-5, atol=1e-7)


def main():
    assert interpreted()
    for max_norm, nesterov in ((1.0, True), (None, True), (1.0, False)):
        pairs = twins(max_norm, nesterov)
        gen = torch.Generator().manual_seed(1)
        for i in range(4):
            scale = 1e-3 if i % 2 else 1.0  # unclipped and clipped
            step_both(pairs, [torch.randn(p.shape, generator=gen) * scale for p in pairs[0][0].parameters()])
        check_close(pairs[0][1], pairs[1][1])

    # A NaN and an Inf in Muon's gradients: weights and momentum bitwise as they were.
    (model, tri) = pairs[1]
    before = tri.params.clone(), [g.momentum.clone() for g in tri.groups]
    grads = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]
    grads[names.index("blocks.0.attn.qkv.weight")][200, 3] = float("nan")
    grads[names.index("blocks.1.mlp.down.weight")][5, 7] = float("inf")
    step_both([(model, tri)], grads)
    assert torch.equal(tri.params.view(torch.int32), before[0].view(torch.int32))
    for m, g in zip(before[1], tri.groups):
        assert torch.equal(m.view(torch.int32), g.momentum.view(torch.int32))
    assert tri.metrics()["nonfinite"] == 1
    print("triton muon passes (interpreted) OK")


if __name__ == "__main__":
    main()
