"""The worker with the model knobs on the CPU: it records the parameter count of the model it
built, refuses to measure a model whose count is not the recipe's, and refuses in one line a
kernel that cannot build the model; the default path with every knob matches the Triton norm,
SwiGLU and cross-entropy (under Triton's interpreter)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tiny_llm.update
from throughput_schema import EXIT_CODES, Protocol, WorkerResult, outcome_kind, read
from throughput_schema.recipe import load_recipe
from tiny_llm.cli import main
from tiny_llm.kernels import Kernels
from tiny_llm.model import build_model
from tiny_llm.update import built_parameters
from tiny_llm.worker import WorkerOptions, run_worker

ROOT = Path(__file__).resolve().parents[3]
KNOBS = [
    "model.n_kv_heads=1",
    "model.tie_embeddings=false",
    "model.qkv_bias=true",
    "model.head_dim=48",
    "model.vocab_size=512",
    "training.micro_batch_size=2",
    "training.batch_tokens=256",
]
FAST = ["--warmup", "1", "--windows", "1", "--window-seconds", "0.05", "--min-updates-per-window", "1"]
QUICK = WorkerOptions(
    device="cpu",
    protocol=Protocol(warmup=1, calibration_updates=1, windows=1, extra_windows=0, window_seconds=0.05,
                      min_updates_per_window=1),
)  # fmt: skip


def knob_recipe(*extra: str):
    return load_recipe(ROOT / "configs" / "tiny.yaml", [*KNOBS, *extra])


def test_worker_records_the_built_models_count(tmp_path):
    recipe = knob_recipe()
    out = tmp_path / "result.json"
    result = run_worker(recipe, out, QUICK)
    assert outcome_kind(result.outcome) == "ok"
    built = built_parameters(build_model(recipe.model, "meta"))
    # Untied: the head is its own (512 x 128) matrix; one kv head of 48 and q/k/v biases.
    per_layer = 128 * 2 * 48 + 2 * (128 * 48) + (2 * 48 + 2 * 48) + 2 * 48 * 128 + 3 * 128 * 320 + 2 * 128
    assert built == 2 * 512 * 128 + 2 * per_layer + 128
    assert read(out, WorkerResult).parameters == result.parameters == built


def test_worker_refuses_a_model_the_recipe_does_not_count(tmp_path, monkeypatch, capsys):
    recipe = knob_recipe()
    counted = built_parameters(build_model(recipe.model, "meta")) + 64
    # The recipe's count as the update checks it, planted wrong: the model must not be measured.
    monkeypatch.setattr(tiny_llm.update, "parameter_count", lambda model: counted)
    out = tmp_path / "result.json"
    result = run_worker(recipe, out, QUICK)
    assert outcome_kind(result.outcome) == "crashed" and result.exit_code == EXIT_CODES["crashed"]
    assert result.outcome.phase == "setup" and not result.windows and result.throughput is None
    assert result.parameters == counted - 64  # what was built, not what the recipe says
    message = result.outcome.message
    assert f"{counted - 64:,} parameters" in message and f"counts {counted:,}" in message
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert read(out, WorkerResult) == result


@pytest.mark.parametrize("knob", ["model.qk_norm=true"])
def test_triton_rope_for_a_model_it_cannot_build_is_one_line(tmp_path, capsys, knob):
    out = tmp_path / "result.json"
    argv = ["benchmark-throughput-worker", "--config", str(ROOT / "configs" / "tiny.yaml"), "--set", knob]
    assert main([*argv, "--rope-kernel", "triton", "--output", str(out), "--device", "cpu", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rope='triton'" in err and knob.split(".")[1].split("=")[0] in err
    assert not out.exists()
    with pytest.raises(ValueError, match="rope='triton'"):
        build_model(load_recipe(ROOT / "configs" / "tiny.yaml", [knob]).model, "meta", kernels=Kernels(rope="triton"))


@pytest.mark.parametrize(
    "knob, flag, kernel",
    [
        ("model.mlp_activation=gelu_tanh", "--swiglu-kernel", "swiglu"),
        ("model.sandwich_norm=true", "--norm-kernel", "norm"),
        ("model.norm_offset=true", "--norm-kernel", "norm"),
    ],
)
def test_gemma_s_knobs_refuse_the_triton_swiglu_and_norm_in_one_line(tmp_path, capsys, knob, flag, kernel):
    out = tmp_path / "result.json"
    argv = ["benchmark-throughput-worker", "--config", str(ROOT / "configs" / "tiny.yaml"), "--set", knob]
    assert main([*argv, flag, "triton", "--output", str(out), "--device", "cpu", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{kernel}='triton'" in err and knob.split(".")[1].split("=")[0] in err
    assert not out.exists()


def interpreted_knobs() -> None:
    """The subprocess's body (TRITON_INTERPRET=1): the knobbed tiny model's loss and gradients
    with the Triton norm, SwiGLU and cross-entropy equal the default path's."""

    def loss_and_grads(kernels: Kernels):
        recipe = knob_recipe("model.qk_norm=true", "model.n_kv_heads=2", "model.context_length=128")
        model = build_model(recipe.model, "cpu", seed=3, kernels=kernels)
        tokens = torch.randint(0, 512, (2, 129), generator=torch.Generator().manual_seed(0))
        loss = model(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    l0, g0 = loss_and_grads(Kernels(swiglu="default"))
    l1, g1 = loss_and_grads(Kernels(swiglu="triton", norm="triton", cross_entropy="triton"))
    torch.testing.assert_close(l1, l0)
    assert "lm_head.weight" in g0 and "blocks.0.attn.qkv.bias" in g0 and "blocks.0.attn.q_norm.weight" in g0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=f"gradient of {n}")
    print("interpreted knobs ok")


@pytest.mark.slow  # Triton's interpreter
@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
    reason="Triton's interpreter needs triton and numpy",
)
def test_triton_kernels_with_every_knob_interpreted():
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_knob_worker as t; t.interpreted_knobs()"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "interpreted knobs ok" in proc.stdout, proc.stdout + proc.stderr


def test_worker_measures_a_gemma_shaped_model_on_the_cpu(tmp_path):
    """Gemma 3's knobs through the whole worker: built, counted, measured, recorded; the first
    layer attends within 16 of the 128 tokens."""
    gemma = [
        "model.qk_norm=true", "model.sliding_window=16", "model.sliding_layers=[0]", "model.rope_local_theta=100.0",
        "model.norm_offset=true", "model.sandwich_norm=true", "model.mlp_activation=gelu_tanh",
        "model.embed_scale=true", "model.attn_scale_dim=32",
    ]  # fmt: skip
    recipe = knob_recipe(*gemma)
    result = run_worker(recipe, tmp_path / "result.json", QUICK)
    assert outcome_kind(result.outcome) == "ok"
    # Two more norms a layer than the knob recipe alone, and q/k norms of 48.
    assert result.parameters == built_parameters(build_model(knob_recipe().model, "meta")) + 2 * (2 * 128 + 2 * 48)
    assert result.throughput is not None and result.throughput.tokens_per_second > 0
    # SDPA on the CPU: the window is a mask over every causal score, and the result says so.
    assert result.kernels["attention"] != "fa4" and result.kernels["window"] == "masked"
