"""`Kernels.attention`'s "auto": FA4 on a Hopper GPU with the fa4 extra from context
`FA4_MIN_CONTEXT`, else PyTorch's SDPA choice, recorded resolved ("sdpa" or "fa4", never
"auto"). Where FA4 could run is faked (`unavailable`), so this runs without a GPU."""

from pathlib import Path

import pytest
import torch

from throughput_schema import Protocol
from throughput_schema.recipe import load_recipe
from tiny_llm import fa4_attention
from tiny_llm.fa4_attention import FA4_MIN_CONTEXT, resolve_attention
from tiny_llm.kernels import ATTENTION, Kernels
from tiny_llm.model import build_model

ROOT = Path(__file__).resolve().parents[3]
CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def model(context: int, *knobs: str):
    sets = [f"model.context_length={context}", "model.n_layers=1", "training.micro_batch_size=1"]
    return load_recipe(ROOT / "configs" / "20m.yaml", [*sets, f"training.batch_tokens={context}", *knobs]).model


@pytest.fixture
def fa4_runs(monkeypatch):
    """FA4 can run here, whatever this machine is: the one question `resolve_attention` asks."""
    monkeypatch.setattr(fa4_attention, "unavailable", lambda device, head_dim: None)


def test_auto_is_fa4_from_the_shortest_measured_context(fa4_runs):
    assert resolve_attention("auto", CUDA, model(FA4_MIN_CONTEXT)) == "fa4"
    assert resolve_attention("auto", CUDA, model(4096)) == "fa4"
    assert resolve_attention("auto", CUDA, model(FA4_MIN_CONTEXT // 2)) == "sdpa"  # not measured


def test_auto_is_sdpa_where_fa4_cannot_run(monkeypatch):
    reasons = []

    def unavailable(device, head_dim):
        reasons.append((device.type, head_dim))
        return "no flash-attn-4 here"

    monkeypatch.setattr(fa4_attention, "unavailable", unavailable)
    assert resolve_attention("auto", CUDA, model(2048, "model.head_dim=96")) == "sdpa"
    assert reasons == [("cuda", 96)]  # asked for this device and this head size


def test_explicit_choices_stand(fa4_runs):
    for choice in ATTENTION[1:]:
        assert resolve_attention(choice, CUDA, model(128)) == choice


def test_the_model_and_the_result_record_what_ran(tmp_path):
    """On this machine (no Hopper GPU, or a context below the rule's) "auto" is SDPA, and both
    the built model and the worker's result say "sdpa", not "auto"."""
    from tiny_llm.worker import WorkerOptions, run_worker

    cfg = model(128)
    assert build_model(cfg, CPU).kernels.attention == "sdpa"
    recipe = load_recipe(
        ROOT / "configs" / "tiny.yaml",
        ["model.context_length=128", "training.micro_batch_size=1", "training.batch_tokens=128"],
    )
    quick = Protocol(
        warmup=1, calibration_updates=1, windows=1, extra_windows=0, window_seconds=0.05, min_updates_per_window=1
    )
    result = run_worker(recipe, tmp_path / "result.json", WorkerOptions(device="cpu", protocol=quick))
    assert result.kernels["attention"] == "sdpa"
    assert result.kernels["rope"] == "default"


def test_rope_auto_is_triton_beside_fa4_where_the_kernel_takes_the_shape(monkeypatch):
    import tiny_llm.kernel_registry as kernel_registry
    from tiny_llm.kernel_registry import resolve_rope

    monkeypatch.setattr(kernel_registry, "triton_imports", lambda: True)
    assert resolve_rope("auto", "fa4", CUDA, model(2048)) == "triton"
    assert resolve_rope("auto", "sdpa", CUDA, model(2048)) == "default"  # measured no gain beside SDPA
    assert resolve_rope("auto", "fa4", CUDA, model(2048, "model.qk_norm=true")) == "default"  # refused shape
    assert resolve_rope("auto", "fa4", CUDA, model(2048, "model.n_kv_heads=1")) == "triton"  # grouped: taken
    # SmolLM3's layers without RoPE and OLMo 2's whole q/k norm: refused shapes too.
    assert resolve_rope("auto", "fa4", CUDA, model(2048, "model.nope_layers=[0]")) == "default"
    assert resolve_rope("auto", "fa4", CUDA, model(2048, "model.qk_norm_whole=true")) == "default"
    assert resolve_rope("auto", "fa4", CPU, model(2048)) == "default"
    for choice in ("default", "triton"):
        assert resolve_rope(choice, "sdpa", CUDA, model(2048)) == choice
    monkeypatch.setattr(kernel_registry, "triton_imports", lambda: False)
    assert resolve_rope("auto", "fa4", CUDA, model(2048)) == "default"


def test_rope_is_recorded_resolved_on_the_cpu():
    assert Kernels().rope == "auto"
    assert build_model(model(128), CPU).kernels.record()["rope"] == "default"


def test_sdpa_leaves_the_choice_to_pytorch():
    assert Kernels(attention="sdpa").sdpa_backends() is None
    assert Kernels(attention="auto").sdpa_backends() is None
    assert Kernels(attention="cudnn").sdpa_backends() is not None


def test_the_fused_kernels_refuse_the_knobs_they_cannot_build():
    from tiny_llm.kernels import unsupported

    assert "(nope_layers)" in (unsupported("rope", model(2048, "model.nope_layers=[0]")) or "")
    assert "(qk_norm_whole)" in (unsupported("rope", model(2048, "model.qk_norm_whole=true")) or "")
    assert "(post_norm)" in (unsupported("norm", model(2048, "model.post_norm=true")) or "")
    assert (
        unsupported("norm", model(2048)) is None and unsupported("swiglu", model(2048, "model.post_norm=true")) is None
    )


def test_gemma_s_knobs_keep_the_triton_swiglu_and_norm_out_and_auto_picks_neither():
    from tiny_llm.kernel_registry import resolve_swiglu
    from tiny_llm.kernels import unsupported

    geglu = model(2048, "model.mlp_activation=gelu_tanh")
    assert "(mlp_activation gelu_tanh)" in (unsupported("swiglu", geglu) or "")
    assert resolve_swiglu("auto", CUDA, geglu) == "default"  # never a refused kernel
    for knob in ("sandwich_norm", "norm_offset"):
        assert f"({knob})" in (unsupported("norm", model(2048, f"model.{knob}=true")) or "")
    with pytest.raises(ValueError, match=r"Kernels\(swiglu='triton'\) cannot build this model"):
        build_model(geglu, "cpu", kernels=Kernels(swiglu="triton"))
    # A window, its own RoPE base and scale take every fused kernel: it hands them each layer's.
    windowed = model(2048, "model.sliding_window=512", "model.sliding_layers=[0]", "model.rope_local_theta=1e4")
    assert all(unsupported(field, windowed) is None for field in ("rope", "norm", "swiglu", "cross_entropy"))


def test_a_windowed_layer_under_sdpa_masks_what_its_window_leaves_out():
    """The SDPA path's window: a query's output moves with the keys inside its window only."""
    cfg = model(128, "model.sliding_window=8", "model.sliding_layers=[0]", "model.n_heads=2", "model.vocab_size=64")
    attn = build_model(cfg, "cpu", seed=1).blocks[0].attn
    assert attn.window == 8
    q, k, v = (torch.randn(1, 2, 16, cfg.head_dim) for _ in range(3))
    out = attn.sdpa(q, k, v)
    moved = v.clone()
    moved[:, :, 3] += 1.0  # key 3 is inside the windows of queries 3 to 10 only
    changed = (attn.sdpa(q, k, moved) - out).abs().amax(dim=(0, 1, 3)) > 0
    assert changed.tolist() == [3 <= i <= 10 for i in range(16)]


def test_a_result_says_whether_its_window_was_skipped_or_masked():
    from tiny_llm.model import window_handling

    windowed = model(2048, "model.sliding_window=512", "model.sliding_layers=[0]")
    assert window_handling("fa4", windowed) == "skipped"
    assert window_handling("sdpa", windowed) == "masked" and window_handling("flash", windowed) == "masked"
    # A window the context never reaches, or no windowed layer, is no window at all.
    assert window_handling("sdpa", model(512, "model.sliding_window=512", "model.sliding_layers=[0]")) is None
    assert window_handling("fa4", model(2048)) is None
