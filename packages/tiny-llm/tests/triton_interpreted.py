"""ArenaAdamW's "triton" kernel in Triton's interpreter on CPU tensors, against the "tensor" kernel.

Run by test_triton_adamw.py in a fresh process with TRITON_INTERPRET=1 (Triton reads it
when the kernels are defined, so it cannot be switched on inside a pytest process whose
other tests compile real Triton kernels). Exits non-zero on the first failed check.
"""

import copy

import torch
import torch.nn as nn

from tiny_llm.arena_adamw import ArenaAdamW
from tiny_llm.triton_adamw import TritonStep, interpreted


class Small(nn.Module):
    """Two matrices and a gain, with sizes that are not multiples of any block."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(37, 29))
        self.b = nn.Parameter(torch.randn(61, 23))
        self.norm = nn.Parameter(torch.ones(29))


SMALL = dict(block=256, norm_block=64, norm_tiles=2, final_block=8)


def twins(max_norm=1.0, **blocks):
    torch.manual_seed(0)
    a = Small()
    b = copy.deepcopy(a)
    kw = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, max_norm=max_norm)
    ref, tri = ArenaAdamW(a, kernel="tensor", **kw), ArenaAdamW(b, kernel="triton", **kw)
    if blocks:  # small blocks: several norm partials and update programs on a small arena
        tri._triton = TritonStep(tri, **blocks)
    return ref, tri


def run(ref, tri, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for i in range(steps):
        g = torch.randn(ref.numel, generator=gen) * (0.01 if i % 2 else 1.0)  # unclipped and clipped
        for opt in (ref, tri):
            opt.grads.copy_(g)
            opt.step()
        assert torch.equal(tri.grads, g), "the triton kernel leaves the gradient arena as it found it"
        torch.testing.assert_close(tri.grad_norm, ref.grad_norm, rtol=1e-6, atol=0)


def check_equal(ref, tri):
    torch.testing.assert_close(tri.params, ref.params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tri.exp_avg, ref.exp_avg, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(tri.exp_avg_sq, ref.exp_avg_sq, rtol=1e-5, atol=1e-9)
    mr, mt = ref.metrics(), tri.metrics()
    mt.pop("grad_norm"), mr.pop("grad_norm")  # compared with a tolerance after every step
    assert mt == mr, (mt, mr)


def main():
    assert interpreted()
    for max_norm, blocks in ((1.0, {}), (None, {}), (1.0, SMALL)):
        ref, tri = twins(max_norm, **blocks)
        run(ref, tri, 8, seed=1)
        check_equal(ref, tri)
    assert tri._triton.n_partials > 8  # several partials, summed over several iterations

    # Deterministic: two instances fed the same gradients end bitwise equal.
    _, one = twins(1.0, **SMALL)
    _, two = twins(1.0, **SMALL)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        g = torch.randn(one.numel, generator=gen)
        for opt in (one, two):
            opt.grads.copy_(g)
            opt.step()
    for x, y in ((one.params, two.params), (one.exp_avg, two.exp_avg), (one.exp_avg_sq, two.exp_avg_sq)):
        assert torch.equal(x, y)
    assert torch.equal(one.grad_norm, two.grad_norm)

    # A NaN gradient: nothing changes, the counters say so, and a later update proceeds.
    before = one.params.clone(), one.exp_avg.clone(), one.exp_avg_sq.clone()
    one.grads[7] = float("nan")
    one.step()
    m = one.metrics()
    assert m["updates"] == 5 and m["step"] == 4 and m["nonfinite"] == 1 and not m["finite"], m
    for a, b in zip(before, (one.params, one.exp_avg, one.exp_avg_sq)):
        assert torch.equal(a, b)
    one.grads.fill_(0.5)
    one.step()
    m = one.metrics()
    assert m["step"] == 5 and m["finite"] and not bool(one.state_is_finite()), m
    print("triton kernel (interpreted) OK")


if __name__ == "__main__":
    main()
