"""ArenaAdamW's "triton" kernel: in Triton's interpreter on CPU, and on CUDA against "fused".

CUDA tests are marked `cuda` and skip without a GPU; all but the import test skip without triton.
"""

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiny_llm.arena_adamw import ArenaAdamW

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
# Triton's CPU interpreter runs the kernels on numpy arrays.
needs_interpreter = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
    reason="Triton's interpreter needs triton and numpy",
)
CUDA = torch.device("cuda")


def _python(code_or_file: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *code_or_file],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        cwd=ROOT,
    )


@needs_interpreter
@pytest.mark.slow
def test_interpreted_kernel_matches_tensor_kernel():
    """Clipped and unclipped steps, max_norm None, several norm partials,
    bitwise determinism, the NaN skip and the untouched gradient arena: see the script."""
    proc = _python([str(HERE / "triton_interpreted.py")], TRITON_INTERPRET="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout


def test_imports_and_refuses_cleanly_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # import triton raises ImportError
        "import torch, tiny_llm.update\n"
        "from tiny_llm.arena_adamw import ArenaAdamW\n"
        "from tiny_llm import triton_adamw\n"
        "assert not triton_adamw.available()\n"
        "try:\n"
        "    ArenaAdamW(torch.nn.Linear(4, 4), kernel='triton')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    proc = _python(["-c", code])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "needs the triton package" in proc.stdout


@needs_triton
def test_kernel_choice_is_checked():
    with pytest.raises(ValueError, match="triton kernel needs FP32"):
        ArenaAdamW(torch.nn.Linear(4, 4).double(), kernel="triton", dtype=torch.float64)
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        with pytest.raises(ValueError, match="needs CUDA"):
            ArenaAdamW(torch.nn.Linear(4, 4), kernel="triton")


@needs_triton
@pytest.mark.slow
def test_kernels_compile_for_hopper_with_vector_accesses():
    """Triton compiles the kernels for sm_90 without a GPU (ptxas ships in its wheel), which
    the interpreter never does. Given what the launch specialises on (16-byte aligned
    arenas, element counts that are multiples of 64), every arena access of the update and
    the norm is a 16-byte vector: the skip on a non-finite norm must not cost that."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tiny_llm import triton_adamw as t

    def ptx(fn, signature, constexprs, aligned, num_warps):
        src = ASTSource(
            fn=fn,
            signature={**signature, **dict.fromkeys(constexprs, "constexpr")},
            constexprs=constexprs,
            attrs={(i,): [["tt.divisibility", 16]] for i in aligned},
        )
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]

    f32 = dict.fromkeys(("lr", "beta1", "beta2", "eps", "weight_decay"), "fp32")
    arenas = dict.fromkeys(("p_ptr", "g_ptr", "m_ptr", "v_ptr", "coef_ptr"), "*fp32")
    warps = t._warps(t.BLOCK)
    update = ptx(t._adamw, {**arenas, "n": "i32", "decay_end": "i32", **f32}, {"BLOCK": t.BLOCK}, range(7), warps)
    norm = ptx(
        t._partial_sumsq,
        {"g_ptr": "*fp32", "partials_ptr": "*fp32", "n": "i32"},
        {"NORM_BLOCK": t.NORM_BLOCK, "NORM_TILES": t.NORM_TILES},
        range(3),
        t._warps(t.NORM_BLOCK),
    )
    ptx(
        t._finish_norm,
        {
            "partials_ptr": "*fp32",
            "n_partials": "i32",
            "norm_ptr": "*fp32",
            "finite_ptr": "*u8",
            "nonfinite_ptr": "*i64",
            "updates_ptr": "*i64",
            "step_ptr": "*fp32",
            "coef_ptr": "*fp32",
            **dict.fromkeys(("max_norm", "lr", "log2_beta1", "log2_beta2"), "fp32"),
        },
        {"FINAL_BLOCK": t.FINAL_BLOCK},
        (),
        t._warps(t.FINAL_BLOCK),
    )
    vectors = t.BLOCK // (4 * 32 * warps)  # per thread and arena: 4 floats each, 32 threads a warp
    assert len(re.findall(r"ld\.global\S*v4\.b32", update)) == 4 * vectors  # p, g, m, v
    assert len(re.findall(r"st\.global\S*v4\.b32", update)) == 3 * vectors  # p, m, v
    assert not re.findall(r"st\.global\S*\.b32", update.replace("v4.b32", ""))
    assert re.findall(r"ld\.global\S*v4\.b32", norm)


# ------------------------------------------------------------------------------ CUDA


def _model():
    from throughput_schema.recipe import load_recipe
    from tiny_llm.model import build_model

    recipe = load_recipe(ROOT / "configs" / "20m.yaml", ["model.n_layers=4"])
    return build_model(recipe.model, CUDA)


def _feed(opts, steps, seed=0):
    """The same gradients into every optimizer (padding included), of two norms (both clipped
    at max_norm 1: the arena holds millions of elements). Returns the last gradients."""
    gen = torch.Generator(device=CUDA).manual_seed(seed)
    g = None
    for i in range(steps):
        g = torch.randn(opts[0].numel, device=CUDA, generator=gen) * (0.02 if i % 2 else 1.0)
        for opt in opts:
            opt.grads.copy_(g)
            opt.step()
    return g


@needs_triton
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("reference", ["fused", "tensor"])
def test_cuda_triton_matches(reference):
    """The tolerances of test_cuda's fused-against-tensor test, over several norm partials."""
    a = _model()
    b = copy.deepcopy(a)
    ref, tri = ArenaAdamW(a, kernel=reference), ArenaAdamW(b, kernel="triton")
    assert tri._triton.n_partials > 1
    g = _feed([ref, tri], 10)
    assert torch.equal(tri.grads, g)  # left as backward wrote it
    assert not torch.equal(ref.grads, g)  # tensor, as clip_grad_norm_, and fused store the clipped one
    torch.testing.assert_close(tri.params, ref.params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tri.exp_avg, ref.exp_avg, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(tri.exp_avg_sq, ref.exp_avg_sq, rtol=1e-5, atol=1e-9)
    mr, mt = ref.metrics(), tri.metrics()
    assert mt.pop("grad_norm") == pytest.approx(mr.pop("grad_norm"), rel=1e-5)
    assert mt == mr


@needs_triton
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_triton_is_deterministic_and_capturable():
    """Two instances run eagerly end bitwise equal; a third, captured once as a CUDA graph
    and replayed with new gradients copied in, ends bitwise equal to them too."""
    from tiny_llm.graph import capture

    base = _model()
    opts = [ArenaAdamW(copy.deepcopy(base), kernel="triton") for _ in range(3)]
    eager, twin, graphed = opts
    _feed([eager, twin], 6, seed=1)
    graph = capture(graphed.step, warmup=0)  # capture records without running the step
    gen = torch.Generator(device=CUDA).manual_seed(1)
    for i in range(6):
        graphed.grads.copy_(torch.randn(graphed.numel, device=CUDA, generator=gen) * (0.02 if i % 2 else 1.0))
        graph.replay()
    torch.cuda.synchronize()
    for opt in (twin, graphed):
        for x, y in (
            (opt.params, eager.params),
            (opt.exp_avg, eager.exp_avg),
            (opt.exp_avg_sq, eager.exp_avg_sq),
            (opt.grad_norm, eager.grad_norm),
        ):
            assert torch.equal(x, y)
        assert opt.metrics() == eager.metrics()
    # A NaN under replay: skipped without a host sync, counted, weights untouched.
    before = graphed.params.clone()
    graphed.grads[11] = float("nan")
    graph.replay()
    m = graphed.metrics()
    assert torch.equal(before, graphed.params) and not m["finite"] and m["nonfinite"] == 1 and m["updates"] == 7
