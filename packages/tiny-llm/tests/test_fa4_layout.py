"""`Kernels(attention="fa4")` on the CPU: its refusals, and its (B, T, H, D) path (the q/k norm
and RoPE applied in that layout, k and v with fewer heads, a window and a scale handed to the
kernel, the output fed to the projection without a transpose) computing what the default
(B, H, T, D) path computes. FA4 itself runs
only on Hopper (test_cuda_fa4.py); here a reference attention in FA4's layout stands in for it,
also behind the ops that fuse the Triton RoPE with it (rope="triton")."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from throughput_schema.recipe import load_recipe
from tiny_llm.kernels import Kernels
from tiny_llm.model import build_model

TINY = Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml"


def visible(T: int, window: int | None) -> torch.Tensor:
    """(T, T) True where a query sees a key: causal, within the window (FA4's window_size_left
    is window - 1), written out here rather than taken from the model."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j > i - window) if window is not None else j <= i


def attention_bthd(q, k, v, window=None, scale=None):
    """Causal attention with FA4's signature: (B, T, H, D) q, (B, T, H_kv, D) k and v."""
    y = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)),
        attn_mask=visible(q.shape[1], window),
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    )
    return y.transpose(1, 2)


@pytest.mark.parametrize(
    "knobs",
    [
        [],
        ["model.n_kv_heads=1"],
        ["model.n_kv_heads=2", "model.qk_norm=true", "model.qkv_bias=true"],
        ["model.head_dim=24"],
        # Gemma 3's windows (shorter than the 32 tokens), scale and norms in FA4's layout.
        [
            "model.n_kv_heads=1",
            "model.qk_norm=true",
            "model.sliding_window=5",
            "model.sliding_layers=[0]",
            "model.rope_local_theta=100.0",
            "model.attn_scale_dim=40",
            "model.norm_offset=true",
            "model.sandwich_norm=true",
            "model.embed_scale=true",
            "model.mlp_activation=gelu_tanh",
        ],
    ],
    ids=["mha", "mqa", "gqa-qk-norm-bias", "head-dim", "gemma3"],
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
        block.attn.fa4 = lambda q, k, v, window, scale: v.repeat_interleave(q.shape[2] // v.shape[2], dim=2)
    assert not torch.allclose(model(idx), expected, atol=1e-3)


def test_fa4_on_the_cpu_is_refused_in_one_line():
    recipe = load_recipe(TINY, ["model.vocab_size=256"])
    with pytest.raises(RuntimeError, match=r"^Kernels\(attention='fa4'\) needs a CUDA GPU, not cpu$"):
        build_model(recipe.model, "cpu", kernels=Kernels(attention="fa4"))


def reference_kernels(monkeypatch_target) -> None:
    """FA4's forward and backward kernels replaced by FP32 math in their layout and signature
    (k and v with as many heads as q or fewer): the output and log-sum-exp, and dq, dk, dv from
    the output's gradient."""

    def probabilities(q, k, window, scale):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        scores = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) * scale
        return scores.masked_fill(~visible(q.shape[1], window), float("-inf"))

    def grouped(t, q):  # each kv head repeated for its group of query heads
        return t.repeat_interleave(q.shape[2] // t.shape[2], dim=2)

    def summed(g, t):  # a repeated head's gradient summed back over its group
        return g.unflatten(2, (t.shape[2], -1)).sum(3)

    def forward(q, k, v, window, scale):
        k, v = grouped(k, q), grouped(v, q)
        scores = probabilities(q, k, window, scale)
        out = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v.float())
        return out.to(q.dtype).contiguous(), scores.logsumexp(-1).contiguous()

    def backward(dout, q, k, v, out, lse, window, scale):
        # Written out: a custom op's body runs below autograd, so torch.autograd.grad cannot.
        k_in, v_in, k, v = k, v, grouped(k, q), grouped(v, q)
        p, dout = probabilities(q, k, window, scale).softmax(-1), dout.float()
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        dv = summed(torch.einsum("bhts,bthd->bshd", p, dout), v_in)
        dp = torch.einsum("bthd,bshd->bhts", dout, v.float())
        ds = p * (dp - torch.einsum("bthd,bthd->bht", dout, out.float())[..., None]) * scale
        dq = torch.einsum("bhts,bshd->bthd", ds, k.float())
        dk = summed(torch.einsum("bhts,bthd->bshd", ds, q.float()), k_in)
        return tuple(g.to(q.dtype).contiguous() for g in (dq, dk, dv))

    monkeypatch_target._forward, monkeypatch_target._backward_kernel = forward, backward


def fused_rope(compiled: bool, kv_heads: int) -> None:
    """Run under TRITON_INTERPRET=1: the model with attention="fa4" and rope="triton" (one pair
    of ops over the projection's output, the Triton RoPE in FA4's layout) computes the default's
    logits and gradients, eager and compiled with fullgraph (the ops' fakes and autograd), with
    as many kv heads as heads and with fewer; with fewer, the first layer attends within a
    window shorter than the sequence, with its own RoPE base and a scale of its own."""
    import tiny_llm.fa4_attention as fa4
    import tiny_llm.triton_rope as rope

    reference_kernels(fa4)
    rope.BLOCK_ROWS = 8  # several programs, the last one partly masked
    knobs = ["model.vocab_size=256", "model.n_heads=4", "model.head_dim=12", f"model.n_kv_heads={kv_heads}"]
    if kv_heads < 4:
        knobs += ["model.sliding_window=5", "model.sliding_layers=[0]", "model.rope_local_theta=100.0"]
        knobs += ["model.attn_scale_dim=20"]
    recipe = load_recipe(TINY, knobs)
    idx = torch.randint(0, 256, (2, 13))
    results = []
    for fused in (False, True):
        model = build_model(recipe.model, "cpu", seed=3)
        for block in model.blocks:
            if fused:
                block.attn.fa4, block.attn.fa4_rope = fa4.rope_attention, True
        step = torch.compile(model, fullgraph=True, backend="aot_eager") if compiled and fused else model
        loss = step(idx, idx.roll(-1, dims=1))
        loss.backward()
        results.append([loss.detach(), *(p.grad.clone() for p in model.parameters())])
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    print("fused rope ok")


@pytest.mark.slow  # Triton's interpreter
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (its CPU interpreter)")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_fa4_with_the_triton_rope_computes_what_the_default_computes(compiled, kv_heads):
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_fa4_layout as t; "
        "t.fused_rope(sys.argv[2] == '1', int(sys.argv[3]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(int(compiled)), str(kv_heads)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "fused rope ok" in proc.stdout, proc.stdout + proc.stderr[-4000:]
