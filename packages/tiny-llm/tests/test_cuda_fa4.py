"""GPU tests of `Kernels(attention="fa4")` (H200): FlashAttention-4's forward and gradients
against SDPA pinned to cuDNN, with as many and with fewer kv heads, and with a sliding window
and a scale of its own (Gemma 3's shape) against SDPA's masked kernel; the model compiled with
fullgraph; the captured complete update against the eager default.

Skipped without CUDA, a Hopper GPU or flash-attn-4 (the `tiny-llm[fa4]` extra).
Run with: pytest packages/tiny-llm/tests/test_cuda_fa4.py
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from throughput_schema.recipe import load_recipe


def _why_not() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    from tiny_llm.fa4_attention import unavailable

    return unavailable(torch.device("cuda"), 64)


pytestmark = [pytest.mark.cuda, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

ROOT = Path(__file__).resolve().parents[3]
CUDA = torch.device("cuda")


def _cudnn(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        y = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True, enable_gqa=k.shape[2] != q.shape[2]
        )
    return y.transpose(1, 2)


def _reference(q, k, v):
    # FP32 math on the same inputs: the yardstick for how far each BF16 kernel may stray.
    k, v = (t.float().repeat_interleave(q.shape[2] // t.shape[2], dim=2) for t in (k, v))
    y = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return y.transpose(1, 2)


@pytest.mark.parametrize(("B", "T", "H", "H_kv", "D"), [(2, 512, 8, 8, 64), (2, 1024, 8, 2, 64), (1, 512, 4, 4, 128)])
def test_forward_and_gradients_match_cudnn(B, T, H, H_kv, D):
    from tiny_llm.fa4_attention import attention

    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, T, H_kv, D, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, T, H_kv, D, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(B, T, H, D, device=CUDA, dtype=torch.bfloat16)
    results = {}
    for name, fn in (("fa4", attention), ("cudnn", _cudnn), ("fp32", _reference)):
        y = fn(q, k, v)
        dq, dk, dv = torch.autograd.grad(y, (q, k, v), dout.to(y.dtype))
        results[name] = [t.float() for t in (y, dq, dk, dv)]
    _fa4_as_close_as(results, "cudnn")


def _fa4_as_close_as(results: dict, yardstick: str) -> None:
    """FA4's output and gradients stray from FP32 (`results["fp32"]`) no more than twice as far as
    the yardstick kernel's do, with a BF16 floor."""
    for i, what in enumerate(("output", "dq", "dk", "dv")):
        ref = results["fp32"][i]
        fa4_err = (results["fa4"][i] - ref).abs().max().item()
        other = (results[yardstick][i] - ref).abs().max().item()
        print(f"{what}: fa4 {fa4_err:.4g}, {yardstick} {other:.4g} from FP32")
        assert fa4_err <= max(2 * other, 0.02), (what, fa4_err, other)


def _masked(q, k, v, window, scale):
    # The model's own SDPA path for a windowed layer: the window as an explicit mask.
    from tiny_llm.model import window_mask

    y = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)),
        attn_mask=window_mask(q.shape[1], window, q.device),
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    )
    return y.transpose(1, 2)


@pytest.mark.parametrize(("T", "window", "scale"), [(1024, 512, None), (2048, 512, 0.05)])
def test_a_windowed_forward_and_gradients_match_the_masked_sdpa(T, window, scale):
    """Gemma 3's shape (4 heads, 1 kv head of 256): FA4 with its window against SDPA with the
    window as a mask, each against FP32 math with the same mask."""
    from tiny_llm.fa4_attention import attention

    torch.manual_seed(0)
    q = torch.randn(2, T, 4, 256, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, T, 1, 256, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, T, 1, 256, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(2, T, 4, 256, device=CUDA, dtype=torch.bfloat16)

    def fp32(q, k, v, window, scale):
        return _masked(q.float(), k.float(), v.float(), window, scale)

    results = {}
    for name, fn in (("fa4", attention), ("sdpa", _masked), ("fp32", fp32)):
        y = fn(q, k, v, window, scale)
        results[name] = [t.float() for t in (y, *torch.autograd.grad(y, (q, k, v), dout.to(y.dtype)))]
    # The window matters: without it the output differs far beyond BF16 rounding.
    assert (attention(q, k, v, None, scale).float() - results["fp32"][0]).abs().max() > 0.1
    _fa4_as_close_as(results, "sdpa")


def _recipe(**overrides):
    sets = [
        "model.context_length=512",
        "training.micro_batch_size=4",
        "training.batch_tokens=2048",
        "model.n_layers=4",
        *(f"model.{k}={v}" for k, v in overrides.items()),
    ]
    return load_recipe(ROOT / "configs" / "20m.yaml", sets)


@pytest.mark.parametrize(
    ("overrides", "rope"),
    [({}, "default"), ({"n_kv_heads": 1}, "default"), ({}, "triton"), ({"n_kv_heads": 1}, "triton")],
    ids=["mha", "mqa", "rope", "mqa-rope"],
)
def test_compiled_model_with_fa4_matches_cudnn(overrides, rope):
    """fullgraph=True: the custom ops keep the graph whole; loss and gradients as with cuDNN
    (rope="triton": RoPE and FA4 fused over the projection's output)."""
    from tiny_llm.kernels import Kernels

    kernels = {name: Kernels(attention=name, rope=rope if name == "fa4" else "default") for name in ("fa4", "cudnn")}
    for name, model in _equal_compiled(_recipe(**overrides), kernels).items():
        assert all(b.attn.fa4_rope == (name == "fa4" and rope == "triton") for b in model.blocks)


def _equal_compiled(recipe, kernels: dict) -> dict:
    """The model under each of two kernel choices, compiled with fullgraph: one BF16 step's loss
    and gradients agree (the first choice against the second); the models, for their checks."""
    from tiny_llm.model import build_model

    tokens = torch.randint(0, recipe.model.vocab_size, (4, 513), device=CUDA)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    losses, grads, models = [], [], {}
    for name, choice in kernels.items():
        models[name] = model = build_model(recipe.model, CUDA, seed=0, kernels=choice)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.compile(model, fullgraph=True)(inputs, targets)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters()]))
    print(dict(zip(kernels, losses)))
    assert abs(losses[0] - losses[1]) < 2e-3 * abs(losses[1])
    rel = ((grads[0] - grads[1]).norm() / grads[1].norm()).item()
    assert rel < 0.02, rel
    return models


# Gemma 3's knobs on the 20m shape: windows of 128 (a quarter of the context) in three of four
# layers with their own RoPE base, one kv head, q/k norms and a scale of its own.
GEMMA3 = {
    "n_kv_heads": 1, "qk_norm": "true", "sliding_window": 128, "sliding_layers": "[0,1,2]",
    "rope_local_theta": 10000.0, "rope_theta": 1000000.0, "norm_offset": "true", "sandwich_norm": "true",
    "mlp_activation": "gelu_tanh", "embed_scale": "true", "attn_scale_dim": 48,
}  # fmt: skip


def test_compiled_windowed_model_with_fa4_matches_the_masked_sdpa():
    """fullgraph=True with Gemma 3's knobs: FA4 with each layer's window against SDPA with the
    window as a mask, the same loss and gradients."""
    from tiny_llm.kernels import Kernels

    # PyTorch's own choice for the masked layers: which of its kernels takes a mask with one kv
    # head depends on its version, and pinning one it lacks would fail the build, not the math.
    kernels = {name: Kernels(attention=name) for name in ("fa4", "sdpa")}
    for model in _equal_compiled(_recipe(**GEMMA3), kernels).values():
        assert [b.attn.window for b in model.blocks] == [128, 128, 128, None]


@pytest.mark.parametrize("H_kv", [6, 2], ids=["mha", "gqa"])
def test_rope_fused_with_fa4_matches_fa4_after_the_default_rope(H_kv):
    """The Triton RoPE in FA4's layout with FA4 (one pair of ops) against the model's own RoPE
    followed by FA4: the same output and the same d(qkv), up to BF16 rounding."""
    from tiny_llm.fa4_attention import attention, rope_attention
    from tiny_llm.model import apply_rope, rope_tables

    B, T, H, D = 2, 1024, 6, 64
    torch.manual_seed(0)
    cos, sin = rope_tables(D, T, 10000.0, CUDA)
    qkv = torch.randn(B, T, (H + 2 * H_kv) * D, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(B, T, H, D, device=CUDA, dtype=torch.bfloat16)

    def unfused(qkv):
        q, k, v = (t.unflatten(-1, (-1, D)) for t in qkv.split((H * D, H_kv * D, H_kv * D), dim=-1))
        return attention(apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None]), v)

    got, want = (fn(qkv) for fn in (lambda t: rope_attention(t, cos, sin, H, H_kv), unfused))
    (d_got,), (d_want,) = (torch.autograd.grad(y, (qkv,), dout) for y in (got, want))
    torch.testing.assert_close(got, want, rtol=0, atol=2e-2)
    rel = ((d_got.float() - d_want.float()).norm() / d_want.float().norm()).item()
    assert rel < 1e-2, rel


def test_captured_update_with_fa4_matches_the_default():
    """The complete update (compile and CUDA graph) with FA4 follows the captured default's
    losses and weights over five updates after setup. The next one is chaotic for this small
    recipe: on the H200 (2026-12-04) the ninth loss was 8.31 with FA4, 9.00 with the default and
    8.77 eager, each a different rounding amplified by Adam, while the five before agreed within
    0.03. The eager losses are printed beside them."""
    from tiny_llm.kernels import Kernels
    from tiny_llm.update import build

    recipe = _recipe()
    runs = {
        "fa4": build(recipe, CUDA, kernels=Kernels(attention="fa4")),
        "fa4-rope": build(recipe, CUDA, kernels=Kernels(attention="fa4", rope="triton")),
        "default": build(recipe, CUDA),
        "eager": build(recipe, CUDA, compile_model=False, use_graph=False),
    }
    for _ in range(runs["fa4"].setup_updates):
        runs["eager"].run()
    losses: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(5):
        for name, built in runs.items():
            built.run()
            losses[name].append(built.update.loss.item())
    assert runs["fa4"].backend == runs["fa4-rope"].backend == runs["default"].backend == "cuda-graph"
    init = build(recipe, CUDA, compile_model=False, use_graph=False).optimizer.params
    fa4, default = runs["fa4"].optimizer.params, runs["default"].optimizer.params
    diff, moved = (fa4 - default).norm().item(), (default - init).norm().item()
    print(f"losses {losses}; weights fa4 - default {diff:.3e}, moved {moved:.3e}")
    for name in ("fa4", "fa4-rope"):
        torch.testing.assert_close(torch.tensor(losses[name]), torch.tensor(losses["default"]), rtol=2e-2, atol=2e-2)
    assert moved > 0 and diff < 0.25 * moved, (diff, moved)
