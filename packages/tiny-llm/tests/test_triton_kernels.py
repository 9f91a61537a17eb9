"""tiny_llm's Triton kernels against the eager code they replace, through autograd.

- swiglu (`tiny_llm.triton_swiglu`): silu(gate) * up over the gate_up projection's output.
- cross_entropy (`tiny_llm.triton_cross_entropy`): the LM head's mean cross-entropy, whose
  input here is x and the weight stacked (one tensor, so both gradients are compared).
- norm (`tiny_llm.triton_norm`): the first norm, an add and norm that keeps the residual and
  the final one that does not, chained as the model chains them, the FP32 residual, the two
  sublayer outputs and the weight stacked in one tensor.
- rope (`tiny_llm.triton_rope`): q, k and v from the QKV projection's output, q and k rotated,
  their gradients given in the strides attention's backward may give them (one transposed).

CPU: the kernels under the Triton interpreter, in a subprocess (TRITON_INTERPRET must be
set before the kernels are defined, and must not leak into the other tests); skipped
where triton or its interpreter is missing. GPU (marked cuda): the kernels at BF16 and
FP32, and compiled with fullgraph launching them. The whole update with each choice,
compiled and captured, is in test_variants.py (GPU_VARIANTS).
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
# Parametrised by kernel name (a Kernels field set to "triton"), so a new kernel is one more case.
KERNELS = ("swiglu", "cross_entropy", "norm", "rope")
AUTO = ("swiglu", "rope")  # the fields whose default "auto" may pick triton on CUDA
# What the compiled forward and backward must launch, per kernel.
LAUNCHES = {
    "swiglu": ("_swiglu_forward", "_swiglu_backward"),
    "cross_entropy": ("_cross_entropy_forward",),
    "norm": ("_add_norm_forward", "_add_norm_backward"),
    "rope": ("_rope_forward", "_rope_backward"),
}
# Kernels whose every output is one FP32 computation rounded once (the CE's gradients pass
# through BF16 matrix products, so they are compared against eager alone).
EXACT = ("swiglu", "norm", "rope")
# FP32 absolute tolerance against eager where a gradient is a long sum taken in another order:
# the norm's weight gradient sums 3 x 4096 rows at "model" (6.9e-5 off on the H200, of values ~1e2).
FP32_ATOL = {"norm": 1e-4}


def swiglu_eager(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def case(kernel: str, size: str, dtype, device="cpu", seed=0):
    """(fused function, eager function, input, output gradients) for one kernel.

    Sizes: "odd" leaves the last tile partly masked; "model" is a 250m layer's width.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    randn = lambda *shape: torch.randn(shape, generator=gen, device=device)  # noqa: E731
    if kernel == "cross_entropy":
        return ce_case(size, dtype, device, gen)
    if kernel == "norm":
        return norm_case(size, dtype, device, gen)
    if kernel == "rope":
        return rope_case(size, dtype, device, gen)
    assert kernel == "swiglu", kernel
    from tiny_llm.triton_swiglu import swiglu

    shape = {"odd": (3, 37, 2 * 160), "small": (70, 2 * 8), "model": (4, 512, 2 * 2560)}[size]
    gate_up = randn(*shape).mul(3).to(dtype)
    return swiglu, swiglu_eager, gate_up, (randn(*shape[:-1], shape[-1] // 2).to(dtype),)


def ce_case(size: str, dtype, device, gen):
    """ "odd": the vocabulary leaves the last block partly masked; "model": 250m's width and vocabulary."""
    from tiny_llm.triton_cross_entropy import linear_cross_entropy

    n, d, v = {"odd": (37, 16, 5000), "small": (8, 8, 300), "model": (2048, 960, 32000)}[size]
    xw = torch.randn(n + v, d, generator=gen, device=device).to(dtype)
    t = torch.randint(0, v, (n,), generator=gen, device=device)
    fused = lambda xw: linear_cross_entropy(xw[:n], xw[n:], t)  # noqa: E731
    eager = lambda xw: F.cross_entropy(F.linear(xw[:n], xw[n:]).float(), t)  # noqa: E731
    return fused, eager, xw, (torch.tensor(3.0, device=device),)  # a non-unit incoming gradient


def norm_chain(xs, n: int, eps: float, fused: bool):
    """The model's chain of norms over `xs` stacked as (residual, delta 1, delta 2, weight):
    h0 = norm(r); r1, h1 = add_norm(r, d1); h2 = add_norm(r1, d2) (final, r2 not kept). The
    residual and the weight are FP32 (the model's); the deltas and outputs in xs's dtype."""
    from tiny_llm.triton_norm import add_rms_norm, rms_norm

    dtype = xs.dtype
    wide = torch.promote_types(dtype, torch.float32)  # FP32, or FP64 for the exact reference
    r, d1, d2, w = xs[:n].to(wide), xs[n : 2 * n], xs[2 * n : 3 * n], xs[3 * n].to(wide)
    if fused:
        h0 = rms_norm(r, w, eps, dtype)
        r1, h1 = add_rms_norm(r, d1, w, eps, dtype)
        return h0, r1, h1, add_rms_norm(r1, d2, w, eps, dtype, keep=False)
    norm = lambda x: F.rms_norm(x, (x.shape[-1],), w, eps).to(dtype)  # noqa: E731
    r1 = r + d1
    return norm(r), r1, norm(r1), norm(r1 + d2)


def norm_case(size: str, dtype, device, gen):
    """ "odd": d_model not a power of two (masked columns) and rows that leave the last tile
    partly masked; "model": 250m's width over several backward programs' worth of rows."""
    n, d = {"odd": (37, 160), "small": (9, 24), "model": (4096, 960)}[size]
    xs = torch.randn(3 * n + 1, d, generator=gen, device=device)
    xs[3 * n] = 1 + 0.1 * xs[3 * n]  # a gain near 1, as trained
    xs = xs.to(dtype)
    grads = tuple(torch.randn(n, d, generator=gen, device=device).to(dtype) for _ in range(4))
    grads = grads[:1] + (grads[1].float(),) + grads[2:]  # r1's gradient is FP32, as the residual
    return (lambda xs: norm_chain(xs, n, 1e-5, fused=True), lambda xs: norm_chain(xs, n, 1e-5, fused=False), xs, grads)


def rope_case(size: str, dtype, device, gen):
    """ "odd": a head_dim whose half is not a power of two (masked columns) and rows that leave
    the last tile partly masked; "grouped": 6 query heads over 2 kv heads; "model": 250m's heads
    over a 2048-token context; "smollm2": SmolLM2-360M's 15 heads over 5 kv heads."""
    from tiny_llm.model import apply_rope, rope_tables
    from tiny_llm.triton_rope import qkv_rope

    b, t, h, h_kv, d = {
        "odd": (3, 7, 3, 3, 24),
        "small": (1, 5, 2, 2, 8),
        "grouped": (2, 9, 6, 2, 8),
        "model": (2, 2048, 15, 15, 64),
        "smollm2": (2, 2048, 15, 5, 64),
    }[size]
    cos, sin = rope_tables(d, t, 10000.0, device=device)
    qkv = torch.randn(b, t, (h + 2 * h_kv) * d, generator=gen, device=device).to(dtype)

    def eager(qkv):
        q, k, v = (x.unflatten(-1, (-1, d)).transpose(1, 2) for x in qkv.split((h * d, h_kv * d, h_kv * d), -1))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    # dq in (B, H, T, D) memory, dk and dv transposed views of (B, T, H_kv, D) memory.
    dq = torch.randn(b, h, t, d, generator=gen, device=device).to(dtype)
    dk, dv = (torch.randn(b, t, h_kv, d, generator=gen, device=device).to(dtype).transpose(1, 2) for _ in range(2))
    return (lambda qkv: qkv_rope(qkv, cos, sin, h, h_kv)), eager, qkv, (dq, dk, dv)


def through_autograd(fn, x, grads):
    """fn's outputs and the gradient of its input, as a list."""
    x = x.detach().clone().requires_grad_()
    outs = fn(x)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, grads)
    return [*(o.detach() for o in outs), x.grad]


def check(fused, eager, x, grads, exact: bool = True, atol32: float = 1e-5) -> None:
    """Equal to eager at the input's precision, and for BF16 within one rounding of exact values."""
    got = through_autograd(fused, x, grads)
    want = through_autograd(eager, x, grads)
    # Values are O(1) and eager BF16 rounds its intermediates (silu(gate) before the product),
    # so against eager compare at a BF16 step of that scale; the exact comparison below is the tight one.
    tol = {"rtol": 1.6e-2, "atol": 1.6e-2} if x.dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": atol32}
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **tol)
    if x.dtype == torch.bfloat16 and exact:
        # The kernels compute in FP32 and round each result once.
        exact = through_autograd(eager, x.double(), tuple(g.double() for g in grads))
        for a, b in zip(got, exact, strict=True):
            torch.testing.assert_close(a.double(), b, rtol=torch.finfo(torch.bfloat16).eps, atol=1e-5)


def tiny_model_loss_and_grads(kernels: Kernels, *knobs: str):
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", ["model.vocab_size=256", "model.context_length=128", *knobs])
    model = build_model(recipe.model, "cpu", seed=3, kernels=kernels)
    tokens = torch.randint(0, 256, (2, 129), generator=torch.Generator().manual_seed(0))
    loss = model(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def interpreted(kernel: str) -> None:
    """The subprocess's body (TRITON_INTERPRET=1): one kernel, alone and in the model, on the CPU."""
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
    for size in ("odd", "small"):
        for dtype in (torch.float32, torch.bfloat16):
            check(*case(kernel, size, dtype), exact=kernel in EXACT)
    if kernel == "norm":  # several row tiles per backward program, the last one partly masked
        import tiny_llm.triton_norm as norm

        norm.MAX_PROGRAMS, norm.PROGRAMS = 3, 8
        for dtype in (torch.float32, torch.bfloat16):
            check(*case(kernel, "odd", dtype), exact=True)
    if kernel == "rope":  # several programs, the last one partly masked
        import tiny_llm.triton_rope as rope

        rope.BLOCK_ROWS = 8
        for size in ("odd", "grouped"):  # grouped: k and v rows only for the first H_kv heads
            for dtype in (torch.float32, torch.bfloat16):
                check(*case(kernel, size, dtype), exact=True)
    # The model, and for RoPE a grouped one (tiny with 4 heads of 32 over 2 kv heads).
    for knobs in ([], ["model.n_heads=4", "model.head_dim=32", "model.n_kv_heads=2"]) if kernel == "rope" else ([],):
        l0, g0 = tiny_model_loss_and_grads(Kernels(**{kernel: "default"}), *knobs)
        l1, g1 = tiny_model_loss_and_grads(Kernels(**{kernel: "triton"}), *knobs)
        torch.testing.assert_close(l1, l0)
        for n in g0:
            torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=f"gradient of {n} {knobs}")
    print(f"interpreted {kernel} ok")


# Triton's CPU interpreter runs the kernels on numpy arrays.
@pytest.mark.slow  # Triton's interpreter
@pytest.mark.skipif(
    not HAS_TRITON or importlib.util.find_spec("numpy") is None, reason="Triton's interpreter needs triton and numpy"
)
@pytest.mark.parametrize("kernel", KERNELS)
def test_interpreted_kernel_matches_eager(kernel):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_triton_kernels as t; t.interpreted(sys.argv[2])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), kernel],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode == SKIP:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0 and f"interpreted {kernel} ok" in proc.stdout, proc.stdout + proc.stderr


def compile_for_hopper(fn, types: tuple[str, ...], const: dict) -> None:
    """Triton's own toolchain compiles `fn` for sm_90 with these argument types, on the CPU;
    a skip where this triton has no CUDA toolchain (not the calling test's question)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    sig = {**dict(zip(names, types)), **{k: "constexpr" for k in const}}
    src = ASTSource(fn, sig, {(names.index(k),): v for k, v in const.items()})
    try:
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    except triton.compiler.errors.CompilationError:
        raise
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"triton cannot compile for sm_90 here: {type(exc).__name__}: {exc}"[:200])


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
def test_norm_kernels_compile_for_hopper_with_fp64_scalars():
    """torch.compile launches a user kernel with a Python float typed fp64 (seen on the H200 with
    torch 2.11: the backward did not compile); each kernel's every variant compiles for sm_90 so."""
    from tiny_llm.triton_norm import _add_norm_backward, _add_norm_forward

    pointers = {
        _add_norm_forward: ("*fp32", "*bf16", "*fp32", "*fp32", "*bf16"),
        _add_norm_backward: ("*fp32", "*fp32", "*bf16", "*fp32", "*fp32", "*bf16", "*fp32"),
    }
    scalars = {_add_norm_forward: ("i32", "i32", "fp64"), _add_norm_backward: ("i32", "i32", "i32", "fp64")}
    for fn, types in pointers.items():
        for flags in ((True, True), (False, True), (True, False)):
            const = {**dict(zip(fn.arg_names[-4:-2], flags)), "BLOCK_ROWS": 4, "BLOCK_COLS": 512}
            compile_for_hopper(fn, types + scalars[fn], const)


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
@pytest.mark.parametrize("index", ["i32", "i64"])  # strides and sizes as torch.compile may type them
def test_rope_kernels_compile_for_hopper(index):
    from tiny_llm.triton_rope import _rope_backward, _rope_forward

    const = {"HALF": 32, "BLOCK_HALF": 32, "BLOCK_ROWS": 64}
    for copy_v in (True, False):  # dense (B, H, T, D) q, k and v for SDPA; (B, T, H, D) q and k for FA4
        types = ("*bf16", "*fp32", "*fp32") + ("*bf16",) * 3 + (index,) * 10
        compile_for_hopper(_rope_forward, types, {**const, "COPY_V": copy_v})
    compile_for_hopper(_rope_backward, ("*bf16",) * 3 + ("*fp32",) * 2 + ("*bf16",) + (index,) * 13, const)


@pytest.mark.parametrize("kernel", KERNELS)
def test_triton_choice_on_cpu_is_one_clear_line(kernel, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", [])
    with pytest.raises(RuntimeError, match=f"{kernel}='triton'") as err:
        build_model(recipe.model, "cpu", kernels=Kernels(**{kernel: "triton"}))
    assert len(str(err.value).splitlines()) == 1
    assert Kernels(**{kernel: "triton"}).record()[kernel] == "triton"
    # The default never asks for triton on the CPU, even where it imports ("auto" resolves there).
    model = build_model(recipe.model, "cpu", kernels=Kernels())
    assert Kernels().record()[kernel] == ("auto" if kernel in AUTO else "default")
    assert model.kernels.record()[kernel] == "default"
    with pytest.raises(ValueError, match=kernel):
        Kernels(**{kernel: "cuda"})


# ------------------------------------------------------------------------------ GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("size", ["odd", "model"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_kernel_matches_eager(kernel, size, dtype):
    check(*case(kernel, size, dtype, device="cuda"), exact=kernel in EXACT, atol32=FP32_ATOL.get(kernel, 1e-5))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("size", ["grouped", "smollm2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_rope_with_fewer_kv_heads_matches_eager(size, dtype):
    check(*case("rope", size, dtype, device="cuda"), exact=True, atol32=FP32_ATOL.get("rope", 1e-5))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("kernel", KERNELS)
def test_compiled_fullgraph_launches_the_kernels(kernel):
    """torch.compile traces the Function without a graph break, and the compiled forward
    and backward launch these kernels (not inductor's own fusion of the eager code)."""
    from torch._inductor.utils import run_and_get_code

    fused, eager, x, grads = case(kernel, "odd", torch.bfloat16, device="cuda")
    torch._dynamo.reset()
    try:
        got, codes = run_and_get_code(through_autograd, torch.compile(fused, fullgraph=True), x, grads)
    finally:
        torch._dynamo.reset()
    code = "\n".join(codes)
    assert all(name in code for name in LAUNCHES[kernel]), LAUNCHES[kernel]
    for a, b in zip(got, through_autograd(eager, x, grads), strict=True):
        torch.testing.assert_close(a, b, rtol=1.6e-2, atol=1.6e-2)
