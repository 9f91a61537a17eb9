"""The "triton" SwiGLU (tiny_llm.triton_swiglu) against silu(gate) * up through autograd.

CPU: the kernels under the Triton interpreter, in a subprocess (TRITON_INTERPRET must be
set before the kernels are defined, and must not leak into the other tests); skipped
where triton or its interpreter is missing. GPU (marked cuda): the compiled kernels at
BF16, and the SwiGLU compiled with fullgraph launching them. The whole update with
`Kernels(swiglu="triton")`, compiled and captured, is in test_variants.py (GPU_VARIANTS).
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[3]
HAS_TRITON = importlib.util.find_spec("triton") is not None
SKIP = 77  # the subprocess's "interpreter cannot run here"


def reference(gate_up: torch.Tensor, dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager silu(gate) * up and d(gate_up), through autograd."""
    x = gate_up.detach().clone().requires_grad_()
    gate, up = x.chunk(2, dim=-1)
    h = F.silu(gate) * up
    h.backward(dh)
    return h.detach(), x.grad


def fused(gate_up: torch.Tensor, dh: torch.Tensor, fn=None) -> tuple[torch.Tensor, torch.Tensor]:
    from tiny_llm.triton_swiglu import swiglu

    x = gate_up.detach().clone().requires_grad_()
    h = (fn or swiglu)(x)
    h.backward(dh)
    return h.detach(), x.grad


def check(gate_up: torch.Tensor, dh: torch.Tensor) -> None:
    """Equal to eager at the input's precision, and within one rounding of the exact values."""
    h, d = fused(gate_up, dh)
    h_ref, d_ref = reference(gate_up, dh)
    assert h.dtype == d.dtype == gate_up.dtype and h.shape == dh.shape and d.shape == gate_up.shape
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(d, d_ref)
    if gate_up.dtype == torch.bfloat16:
        # Eager rounds silu(gate) to BF16 before the product; the kernel rounds each result
        # once, so it stays within half a BF16 step (eps/2 relative) of the exact values.
        h64, d64 = reference(gate_up.double(), dh.double())
        eps = torch.finfo(torch.bfloat16).eps
        torch.testing.assert_close(h.double(), h64, rtol=eps, atol=1e-12)
        torch.testing.assert_close(d.double(), d64, rtol=eps, atol=1e-12)


def inputs(shape, dtype, device="cpu", seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    gate_up = torch.randn(shape, generator=gen, device=device).mul(3).to(dtype)
    dh = torch.randn((*shape[:-1], shape[-1] // 2), generator=gen, device=device).to(dtype)
    return gate_up, dh


def tiny_model_loss_and_grads(kernels: Kernels):
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", ["model.vocab_size=256", "model.context_length=128"])
    model = build_model(recipe.model, "cpu", seed=3, kernels=kernels)
    tokens = torch.randint(0, 256, (2, 129), generator=torch.Generator().manual_seed(0))
    loss = model(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def interpreted() -> None:
    """The subprocess's body (TRITON_INTERPRET=1): kernels and the model on the CPU."""
    import triton
    import triton.language as tl

    try:
        @triton.jit
        def _probe(x):
            tl.store(x, 1.0)

        probe = torch.zeros(1)
        _probe[(1,)](probe)
        assert probe.item() == 1.0
    except Exception as exc:  # noqa: BLE001 - no interpreter here is a skip, not a failure
        print(f"the Triton interpreter cannot run: {exc}")
        sys.exit(SKIP)
    # Odd sizes: rows and features that do not fill the last tile (masks).
    for shape in ((3, 37, 2 * 160), (70, 2 * 8)):
        for dtype in (torch.float32, torch.bfloat16):
            check(*inputs(shape, dtype))
    l0, g0 = tiny_model_loss_and_grads(Kernels())
    l1, g1 = tiny_model_loss_and_grads(Kernels(swiglu="triton"))
    torch.testing.assert_close(l1, l0)
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=f"gradient of {n}")
    print("interpreted swiglu ok")


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_interpreted_kernels_match_eager():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_triton_swiglu as t; t.interpreted()"
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode == SKIP:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0 and "interpreted swiglu ok" in proc.stdout, proc.stdout + proc.stderr


def test_triton_choice_on_cpu_is_one_clear_line(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", [])
    with pytest.raises(RuntimeError, match="swiglu='triton'") as err:
        build_model(recipe.model, "cpu", kernels=Kernels(swiglu="triton"))
    assert len(str(err.value).splitlines()) == 1
    assert Kernels(swiglu="triton").record()["swiglu"] == "triton" and "swiglu" not in Kernels().record()
    with pytest.raises(ValueError, match="swiglu"):
        Kernels(swiglu="cuda")


# ------------------------------------------------------------------------------ GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("shape", [(4, 512, 2 * 2560), (3, 77, 2 * 200), (1000, 2 * 3456)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_kernels_match_eager(shape, dtype):
    check(*inputs(shape, dtype, device="cuda"))


@pytest.mark.cuda
@needs_cuda
def test_compiled_fullgraph_launches_the_kernels():
    """torch.compile traces the Function without a graph break, and the compiled forward
    and backward launch these kernels (not inductor's own SwiGLU)."""
    from torch._inductor.utils import run_and_get_code

    from tiny_llm.triton_swiglu import swiglu

    gate_up, dh = inputs((4, 256, 2 * 512), torch.bfloat16, device="cuda")
    torch._dynamo.reset()
    try:
        compiled = torch.compile(swiglu, fullgraph=True)
        (h, d), codes = run_and_get_code(fused, gate_up, dh, compiled)
    finally:
        torch._dynamo.reset()
    code = "\n".join(codes)
    assert "_swiglu_forward" in code and "_swiglu_backward" in code
    h_ref, d_ref = reference(gate_up, dh)
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(d, d_ref)
