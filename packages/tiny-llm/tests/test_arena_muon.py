"""ArenaMuon against torch.optim.Muon's algorithm plus torch.optim.AdamW on the same split.

The reference is written out here from torch.optim.Muon (`_single_tensor_muon` and
`_zeropower_via_newtonschulz`), one matrix at a time, so that ours (batched per shape, the
momentum kept per shape, the clip folded in) is checked against the algorithm and not
against itself. Tolerances:
- FP64 arenas, products in FP64 both sides: the same arithmetic, 1e-10 relative;
- FP32 arenas, products in BF16 as torch casts them: batched and one-at-a-time BF16
  products may round an entry of the orthogonalised matrix (at most about 1) to the next
  BF16 value (2^-8 relative), which the adjusted lr (lr · 0.2 · sqrt(320) for the widest
  matrix) carries into the weight: `BF16_ATOL` allows that once per step, 7e-4 over 5 steps,
  while the weights travel more than ten times as far;
- torch.optim.Muon itself (FP32 parameters, its BF16 Newton-Schulz) with
  torch.optim.AdamW: the same `BF16_ATOL`.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from throughput_schema import OptimizerConfig
from throughput_schema.muon import NoMuonMatrix, adjusted_lr, muon_matrices, owns
from throughput_schema.recipe import load_recipe
from tiny_llm.arena_muon import ArenaMuon
from tiny_llm.model import build_model

ROOT = Path(__file__).resolve().parents[3]
CONFIG = OptimizerConfig(name="muon", lr=1e-2, weight_decay=0.1)
STEPS = 5
BF16_ATOL = STEPS * CONFIG.lr * 0.2 * 320**0.5 * 2**-8


def _model(dtype, n_kv_heads=None):
    overrides = ["model.vocab_size=64", "model.n_layers=2"]
    if n_kv_heads:
        overrides.append(f"model.n_kv_heads={n_kv_heads}")
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", overrides)
    return build_model(recipe.model, torch.device("cpu"), seed=0).to(dtype), recipe


def _ns_reference(grad, coefficients, steps, dtype):
    """torch.optim.Muon's `_zeropower_via_newtonschulz`, with its BF16 cast as `dtype`."""
    a, b, c = coefficients
    x = grad.to(dtype=dtype, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


class Reference:
    """Muon over the split matrices (as row views of the fused weights) and torch's AdamW over
    the rest, after clip_grad_norm_ over every gradient."""

    def __init__(self, model, config, ns_dtype):
        self.model, self.c, self.ns_dtype = model, config, ns_dtype
        by_name = dict(model.named_parameters())
        self.matrices = [(m, by_name[m.name]) for m in muon_matrices(model.cfg)]
        self.bufs = [torch.zeros(m.shape, dtype=p.dtype) for m, p in self.matrices]
        rest = [(n, p) for n, p in by_name.items() if not owns(n, p.ndim)]
        groups = [
            {"params": [p for _, p in rest if p.ndim >= 2], "weight_decay": config.weight_decay},
            {"params": [p for _, p in rest if p.ndim < 2], "weight_decay": 0.0},
        ]
        self.adamw = torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), eps=config.eps)

    @torch.no_grad()
    def step(self):
        torch.nn.utils.clip_grad_norm_(list(self.model.parameters()), 1.0, foreach=False)
        c = self.c
        for (m, p), buf in zip(self.matrices, self.bufs):
            grad = p.grad[m.start : m.stop]
            buf.lerp_(grad, 1 - c.muon_momentum)
            update = grad.lerp(buf, c.muon_momentum) if c.muon_nesterov else buf
            ortho = _ns_reference(update, c.muon_ns_coefficients, c.muon_ns_steps, self.ns_dtype)
            rows = p.data[m.start : m.stop]
            rows.mul_(1 - c.lr * c.weight_decay)
            rows.add_(ortho.to(rows.dtype), alpha=-adjusted_lr(c, m.shape))
        self.adamw.step()


def _run(ours, opt, ref, ref_step, steps, dtype, scale=1.0):
    gen = torch.Generator().manual_seed(1)
    ref_params, our_params = list(ref.parameters()), list(ours.parameters())
    for _ in range(steps):
        grads = [torch.randn(p.shape, generator=gen, dtype=dtype) * scale for p in ref_params]
        for p, g in zip(ref_params, grads):
            p.grad = g.clone()
        ref_step()
        opt.zero_grad()
        for p, g in zip(our_params, grads):
            p.grad.copy_(g)  # .grad is a view: the write lands in the arena
        opt.step()
    return ref_params, our_params


@pytest.mark.parametrize("scale", [1e-3, 1.0])  # unclipped and clipped
def test_matches_the_algorithm_exactly_in_fp64(scale):
    ours, _ = _model(torch.float64)
    ref = copy.deepcopy(ours)
    opt = ArenaMuon(ours, CONFIG, dtype=torch.float64)
    reference = Reference(ref, CONFIG, torch.float64)
    ref_params, our_params = _run(ours, opt, ref, reference.step, STEPS, torch.float64, scale)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    assert opt.metrics()["updates"] == 5 and opt.metrics()["step"] == 5


@pytest.mark.parametrize("n_kv_heads", [None, 1])  # q, k, v of one shape, and k, v narrower than q
def test_matches_the_fp32_reference_with_bf16_products(n_kv_heads):
    ours, _ = _model(torch.float32, n_kv_heads)
    ref = copy.deepcopy(ours)
    opt = ArenaMuon(ours, CONFIG, ns_dtype=torch.bfloat16)
    reference = Reference(ref, CONFIG, torch.bfloat16)
    ref_params, our_params = _run(ours, opt, ref, reference.step, STEPS, torch.float32)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=0, atol=BF16_ATOL)
    start, _ = _model(torch.float32, n_kv_heads)
    travelled = max((a - b).abs().max().item() for a, b in zip(start.parameters(), our_params))
    assert travelled > 10 * BF16_ATOL, f"the weights moved {travelled:.2e}: the tolerance would hide a wrong step"


def test_matches_torch_optim_muon_within_bf16():
    ours, _ = _model(torch.float32)
    ref = copy.deepcopy(ours)
    opt = ArenaMuon(ours, CONFIG, ns_dtype=torch.bfloat16)  # torch.optim.Muon's products are BF16
    by_name = dict(ref.named_parameters())
    slices, muon_params = [], []
    for m in muon_matrices(ref.cfg):  # each split matrix a Parameter aliasing its rows
        s = torch.nn.Parameter(by_name[m.name].data[m.start : m.stop])
        slices.append((s, by_name[m.name], m))
        muon_params.append(s)
    c = CONFIG
    muon = torch.optim.Muon(
        muon_params,
        lr=c.lr,
        weight_decay=c.weight_decay,
        momentum=c.muon_momentum,
        nesterov=c.muon_nesterov,
        ns_coefficients=c.muon_ns_coefficients,
        ns_steps=c.muon_ns_steps,
        adjust_lr_fn=c.muon_adjust_lr,
    )
    rest = [(n, p) for n, p in by_name.items() if not owns(n, p.ndim)]
    adamw = torch.optim.AdamW(
        [
            {"params": [p for _, p in rest if p.ndim >= 2], "weight_decay": c.weight_decay},
            {"params": [p for _, p in rest if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=c.lr,
        betas=(c.beta1, c.beta2),
        eps=c.eps,
    )

    def step():
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 1.0)
        for s, p, m in slices:
            s.grad = p.grad[m.start : m.stop]
        muon.step()
        adamw.step()

    ref_params, our_params = _run(ours, opt, ref, step, STEPS, torch.float32)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=0, atol=BF16_ATOL)


def test_owns_the_split_hidden_matrices_and_leaves_the_rest_to_adamw():
    model, recipe = _model(torch.float32, n_kv_heads=1)
    opt = ArenaMuon(model, CONFIG)
    layer = [m.shape for m in muon_matrices(recipe.model) if m.name.startswith("blocks.0.")]
    # q, k, v (k and v one head wide), proj, gate, up, down: 7 matrices a layer
    assert layer == [(128, 128), (64, 128), (64, 128), (128, 128), (320, 128), (320, 128), (128, 320)]
    assert sum(g.momentum.shape[0] for g in opt.groups) == 14
    assert {s.name for s in opt.adamw.slots} == {"embed.weight", "norm.weight"} | {
        f"blocks.{i}.{n}.weight" for i in range(2) for n in ("attn_norm", "mlp_norm")
    }
    # One state tensor per Muon matrix: its momentum, none of AdamW's two moments.
    assert opt.adamw.exp_avg.numel() < model.embed.weight.numel() + 1024


def test_a_model_without_a_hidden_matrix_is_refused_in_one_line():
    _, recipe = _model(torch.float32)
    from msgspec.structs import replace

    with pytest.raises(
        NoMuonMatrix, match="^the model has no hidden 2-D matrix for Muon to own; use optimizer.name=adamw$"
    ):
        muon_matrices(replace(recipe.model, n_layers=0))


def test_a_nonfinite_gradient_skips_muon_and_adamw_alike():
    ours, _ = _model(torch.float32)
    opt = ArenaMuon(ours, CONFIG)
    before = [p.detach().clone() for p in ours.parameters()]
    momentum = [g.momentum.clone() for g in opt.groups]
    opt.zero_grad()
    next(iter(ours.parameters())).grad[0, 0] = float("nan")
    opt.step()
    for a, b in zip(before, ours.parameters()):
        assert torch.equal(a, b)
    for a, g in zip(momentum, opt.groups):
        assert torch.equal(a, g.momentum)
    assert opt.metrics()["nonfinite"] == 1 and not bool(opt.state_is_finite())


def _bits(t):
    return t.detach().clone().view(torch.int32 if t.dtype == torch.float32 else torch.int64)


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_each_shape_is_strided_views_that_alias_the_weights_in_the_arena(n_kv_heads):
    model, recipe = _model(torch.float32, n_kv_heads)
    opt = ArenaMuon(model, CONFIG)
    by_name = dict(model.named_parameters())
    base, end = opt.params.data_ptr(), opt.params.data_ptr() + opt.params.numel() * 4
    for group in opt.groups:
        expected = {
            by_name[m.name].data[m.start : m.stop].data_ptr()
            for m in muon_matrices(recipe.model)
            if m.shape == group.shape
        }
        seen = [view[i].data_ptr() for view in group.params for i in range(view.shape[0])]
        assert sorted(seen) == sorted(expected), f"{group.shape}: the views are not the group's matrices"
        assert all(base <= ptr < end for ptr in seen)
        assert sum(v.shape[0] for v in group.params) == group.momentum.shape[0]
    # Role by role in the arena, the matrices of one shape are few views: with as many kv heads
    # as heads, q, k, v and proj of both layers are one.
    runs = {g.shape: len(g.runs) for g in opt.groups}
    assert runs == ({(128, 128): 1, (320, 128): 1, (128, 320): 1} if n_kv_heads is None else
                    {(128, 128): 2, (64, 128): 2, (320, 128): 1, (128, 320): 1})  # fmt: skip
    # An in-place step moves the model's own weights, which stay views into the arena.
    ptrs = [p.data_ptr() for p in model.parameters()]
    before = [p.detach().clone() for p in opt.parameters]
    opt.zero_grad()
    for p in model.parameters():
        p.grad.copy_(torch.randn_like(p))
    opt.step()
    opt.check_views()
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    assert all(not torch.equal(a, b) for a, b in zip(before, opt.parameters))
    # Writing through a group's view is writing the model's weights: the down projections of
    # both layers are the (128, 320) group's one view.
    down = [by_name[f"blocks.{i}.mlp.down.weight"] for i in range(2)]
    others = {n: p.detach().clone() for n, p in by_name.items() if "mlp.down" not in n}
    old = [d.detach().clone() for d in down]
    (view,) = next(g for g in opt.groups if g.shape == (128, 320)).params
    with torch.no_grad():
        view.add_(1.0)
    for d, o in zip(down, old):
        assert torch.equal(d, o + 1.0)
    assert all(torch.equal(by_name[n], o) for n, o in others.items())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nonfinite_muon_gradient_leaves_weights_and_momentum_bitwise_unchanged(bad):
    ours, _ = _model(torch.float32)
    opt = ArenaMuon(ours, CONFIG)
    gen = torch.Generator().manual_seed(3)
    for _ in range(2):  # a momentum that is not zero
        opt.zero_grad()
        for p in ours.parameters():
            p.grad.copy_(torch.randn(p.shape, generator=gen))
        opt.step()
    params, adamw = _bits(opt.params), _bits(opt.adamw.params)
    momentum = [_bits(g.momentum) for g in opt.groups]
    assert all(bool(m.any()) for m in momentum)
    opt.zero_grad()
    for p in ours.parameters():
        p.grad.copy_(torch.randn(p.shape, generator=gen))
    dict(ours.named_parameters())["blocks.1.mlp.down.weight"].grad[3, 5] = bad
    opt.step()
    assert torch.equal(_bits(opt.params), params) and torch.equal(_bits(opt.adamw.params), adamw)
    for before, g in zip(momentum, opt.groups):
        assert torch.equal(_bits(g.momentum), before)
    assert opt.metrics()["nonfinite"] == 1 and opt.metrics()["step"] == 2
    opt.zero_grad()
    for p in ours.parameters():
        p.grad.copy_(torch.randn(p.shape, generator=gen))
    opt.step()  # the next finite step updates again
    assert not torch.equal(_bits(opt.params), params)
    assert all(not torch.equal(_bits(g.momentum), before) for before, g in zip(momentum, opt.groups))


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
    reason="Triton's interpreter needs triton and numpy",
)
@pytest.mark.slow  # minutes in the interpreter on a loaded machine
def test_the_triton_passes_match_the_tensor_passes_in_the_interpreter():
    """Clipped, unclipped and unbounded, with and without Nesterov, groups of several runs, and
    a non-finite step that leaves weights and momentum bitwise unchanged
    (`triton_muon_interpreted.py`, in a fresh process: TRITON_INTERPRET=1 must precede triton)."""
    script = Path(__file__).with_name("triton_muon_interpreted.py")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout


def test_the_elementwise_choice_is_checked_in_one_line():
    model, _ = _model(torch.float32)
    with pytest.raises(ValueError, match="^elementwise must be one of tensor, triton, got 'fused'$"):
        ArenaMuon(model, CONFIG, elementwise="fused")
    if importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        with pytest.raises(ValueError, match="need CUDA"):
            ArenaMuon(model, CONFIG, elementwise="triton")
    assert ArenaMuon(model, CONFIG).elementwise == "tensor"  # the CPU's default
