"""ArenaAdamW + clipping against torch.optim.AdamW + clip_grad_norm_ (float64 reference)."""

import copy
import shutil

import pytest
import torch
import torch.nn as nn

from tiny_llm.arena_adamw import ALIGN, ArenaAdamW, decays


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 12)
        self.lin = nn.Linear(12, 30, bias=False)
        self.norm = nn.Parameter(torch.ones(12))
        self.head = nn.Linear(12, 50, bias=False)
        self.head.weight = self.emb.weight  # tied, as in the model


def _pair(max_norm=1.0):
    torch.manual_seed(0)
    ref = Toy().double()
    ours = copy.deepcopy(ref)
    kw = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    opt = ArenaAdamW(ours, weight_decay=0.1, max_norm=max_norm, dtype=torch.float64, **kw)
    groups = [
        {"params": [p for n, p in ref.named_parameters() if decays(n, p)], "weight_decay": 0.1},
        {"params": [p for n, p in ref.named_parameters() if not decays(n, p)], "weight_decay": 0.0},
    ]
    ref_opt = torch.optim.AdamW(groups, foreach=False, **kw)
    return ref, ref_opt, ours, opt


def _random_grads(model_params, scale, gen):
    return [torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale for p in model_params]


@pytest.mark.parametrize("scale", [0.01, 1.0])  # unclipped and clipped regimes
def test_matches_torch_adamw_with_clipping(scale):
    ref, ref_opt, ours, opt = _pair()
    ref_params = list(ref.parameters())
    our_params = list(ours.parameters())
    gen = torch.Generator().manual_seed(1)
    for _ in range(12):
        grads = _random_grads(ref_params, scale, gen)
        for p, g in zip(ref_params, grads):
            p.grad = g.clone()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref_params, 1.0, foreach=False)
        ref_opt.step()
        opt.zero_grad()
        for p, g in zip(our_params, grads):
            p.grad.copy_(g)  # .grad is a view: writes land in the arena
        opt.step()
        torch.testing.assert_close(opt.grad_norm, ref_norm, rtol=1e-12, atol=0)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    m = opt.metrics()
    assert m["updates"] == 12 and m["step"] == 12 and m["nonfinite"] == 0 and m["finite"]


def test_views_and_alignment():
    _, _, ours, opt = _pair()
    opt.check_views()
    for slot in opt.slots:
        assert slot.offset % ALIGN == 0
    # Decayed (matrices) first, then the norm gain; the tied weight appears once.
    names = [s.name for s in opt.slots]
    assert names[-1] == "norm" and len(names) == 3
    assert opt.numel >= sum(p.numel() for p in ours.parameters())
    assert ours.head.weight.data_ptr() == ours.emb.weight.data_ptr()


def test_injected_nan_is_caught_and_skipped():
    _, _, ours, opt = _pair()
    params = list(ours.parameters())
    gen = torch.Generator().manual_seed(2)
    for g, p in zip(_random_grads(params, 1.0, gen), params):
        p.grad.copy_(g)
    opt.step()
    before = opt.params.clone(), opt.exp_avg.clone(), opt.exp_avg_sq.clone()
    for g, p in zip(_random_grads(params, 1.0, gen), params):
        p.grad.copy_(g)
    params[1].grad.view(-1)[3] = float("nan")
    opt.step()
    m = opt.metrics()
    # The counter counts every attempted update; the AdamW step only applied ones.
    assert m["updates"] == 2 and m["step"] == 1 and m["nonfinite"] == 1 and not m["finite"]
    assert not bool(opt.state_is_finite())
    for a, b in zip(before, (opt.params, opt.exp_avg, opt.exp_avg_sq)):
        assert torch.equal(a, b)  # skipped: nothing changed
    # A later finite update proceeds, but the sticky flag keeps the state marked.
    for g, p in zip(_random_grads(params, 1.0, gen), params):
        p.grad.copy_(g)
    opt.step()
    assert opt.metrics()["step"] == 2 and not bool(opt.state_is_finite())


def test_float32_cpu_matches_float64():
    _, _, ours, opt64 = _pair()
    torch.manual_seed(0)
    model32 = Toy()
    opt32 = ArenaAdamW(model32, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, max_norm=1.0)
    assert opt32.kernel == "tensor"
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        grads = _random_grads(list(ours.parameters()), 1.0, gen)
        for p, g in zip(ours.parameters(), grads):
            p.grad.copy_(g)
        for p, g in zip(model32.parameters(), grads):
            p.grad.copy_(g.float())
        opt64.step()
        opt32.step()
    torch.testing.assert_close(opt32.params.double(), opt64.params, rtol=1e-5, atol=1e-6)


def _twins(kernel, dtype=torch.float64):
    torch.manual_seed(0)
    a = Toy().to(dtype)
    b = copy.deepcopy(a)
    kw = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, max_norm=1.0, dtype=dtype)
    return a, ArenaAdamW(a, kernel="tensor", **kw), b, ArenaAdamW(b, kernel=kernel, **kw)


@pytest.mark.slow  # inductor compiles C++ on the CPU
@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="inductor's CPU code generation needs a C++ compiler",
)
def test_compiled_kernel_matches_tensor_kernel():
    """The "compiled" kernel is the tensor step through inductor: the same weights and
    moments over 10 clipped and unclipped steps, the same skip of a NaN, and the
    gradient arena left as backward wrote it."""
    a, ta, b, tb = _twins("compiled")
    gen = torch.Generator().manual_seed(4)
    for i in range(10):
        g = torch.randn(ta.numel, generator=gen, dtype=torch.float64) * (0.01 if i % 2 else 1.0)
        for opt in (ta, tb):
            opt.grads.copy_(g)
            opt.step()
        torch.testing.assert_close(tb.grads, g, rtol=0, atol=0)  # not clipped in place
    for x, y in ((ta.params, tb.params), (ta.exp_avg, tb.exp_avg), (ta.exp_avg_sq, tb.exp_avg_sq)):
        torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-14)
    ma, mb = ta.metrics(), tb.metrics()
    assert mb.pop("grad_norm") == pytest.approx(ma.pop("grad_norm"), rel=1e-12)  # reduction order differs
    assert ma == mb
    before = tb.params.clone()
    tb.grads[7] = float("nan")
    tb.step()
    m = tb.metrics()
    assert torch.equal(before, tb.params) and not m["finite"] and m["nonfinite"] == 1 and m["updates"] == 11


def test_kernel_choice_is_checked():
    with pytest.raises(ValueError, match="kernel must be one of"):
        _twins("foreach")
    with pytest.raises(ValueError, match="FP32"):
        _twins("fused")  # float64 arenas
