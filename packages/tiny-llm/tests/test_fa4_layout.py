"""`Kernels(attention="fa4")` on the CPU: its refusals, and its (B, T, H, D) path (the q/k norm
and RoPE applied in that layout, k and v with fewer heads, the output fed to the projection
without a transpose) computing what the default (B, H, T, D) path computes. FA4 itself runs
only on Hopper (test_cuda_fa4.py); here a reference attention in FA4's layout stands in for it."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from throughput_schema.recipe import load_recipe
from tiny_llm.kernels import Kernels
from tiny_llm.model import build_model

TINY = Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml"


def attention_bthd(q, k, v):
    """Causal attention with FA4's signature: (B, T, H, D) q, (B, T, H_kv, D) k and v."""
    y = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True, enable_gqa=k.shape[2] != q.shape[2]
    )
    return y.transpose(1, 2)


@pytest.mark.parametrize(
    "knobs",
    [
        [],
        ["model.n_kv_heads=1"],
        ["model.n_kv_heads=2", "model.qk_norm=true", "model.qkv_bias=true"],
        ["model.head_dim=24"],
    ],
    ids=["mha", "mqa", "gqa-qk-norm-bias", "head-dim"],
)
def test_the_fa4_layout_computes_what_the_default_computes(knobs):
    recipe = load_recipe(TINY, ["model.vocab_size=256", "model.n_heads=4", *knobs])
    model = build_model(recipe.model, "cpu", seed=3)
    idx = torch.randint(0, 256, (2, 32))
    expected = model(idx)
    for block in model.blocks:
        block.attn.fa4 = attention_bthd
    torch.testing.assert_close(model(idx), expected, rtol=1e-5, atol=1e-5)
    # The stand-in is in use: a wrong attention changes the logits.
    for block in model.blocks:
        block.attn.fa4 = lambda q, k, v: v.repeat_interleave(q.shape[2] // v.shape[2], dim=2)
    assert not torch.allclose(model(idx), expected, atol=1e-3)


def test_fa4_on_the_cpu_is_refused_in_one_line():
    recipe = load_recipe(TINY, ["model.vocab_size=256"])
    with pytest.raises(RuntimeError, match=r"^Kernels\(attention='fa4'\) needs a CUDA GPU, not cpu$"):
        build_model(recipe.model, "cpu", kernels=Kernels(attention="fa4"))


def test_fa4_with_the_triton_rope_is_refused():
    with pytest.raises(ValueError, match="attention='fa4' rotates q and k in FA4's .* choose one"):
        Kernels(attention="fa4", rope="triton")
