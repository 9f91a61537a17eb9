"""FP8 linears on the CPU: the filter, the conversion and its records through torchao's
emulation (`build(..., fp8_emulate=True)`, tests only), and every refusal of an FP8
precision the worker can meet without a GPU."""

import math
import sys
from pathlib import Path

import msgspec
import pytest
import torch
from torch import nn

from throughput_schema import (
    EXIT_CODES,
    PointSpec,
    Protocol,
    WorkerRequest,
    WorkerResult,
    outcome_kind,
    read,
    write_atomic,
)
from throughput_schema.precision import fp8_plan, recipe_linears
from throughput_schema.recipe import load_recipe
from throughput_schema.shape import weight_shapes
from tiny_llm.cli import main
from tiny_llm.update import build

Float8Linear = pytest.importorskip("torchao.float8.float8_linear").Float8Linear

ROOT = Path(__file__).resolve().parents[3]
CPU = torch.device("cpu")
# Widths at which some linears pass each recipe's filter and others do not: at tensorwise the
# fused gate/up (1152 x 128) converts and the rest are too small; at rowwise only the gate/up
# (4224 x 1088) converts.
SHAPES = {
    "fp8-tensorwise": ["model.ffn_dim=576"],
    "fp8-rowwise": ["model.d_model=1088", "model.n_heads=17", "model.ffn_dim=2112"],
}


def recipe(precision, *extra):
    sets = ["model.vocab_size=512", "training.micro_batch_size=2", "training.batch_tokens=256"]
    return load_recipe(ROOT / "configs" / "tiny.yaml", [*sets, f"training.precision={precision}", *extra])


@pytest.mark.parametrize("precision", ["fp8-tensorwise", "fp8-rowwise"])
def test_the_filter_converts_what_the_recipe_implies_and_says_why_not_the_rest(precision):
    r = recipe(precision, *SHAPES[precision])
    built = build(r, CPU, fp8_emulate=True)
    fp8 = built.fp8
    assert fp8 is not None and fp8.recipe == precision.removeprefix("fp8-")
    assert fp8.converted == ["blocks.0.mlp.gate_up", "blocks.1.mlp.gate_up"]
    modules = dict(built.model.named_modules())
    assert all(isinstance(modules[n], Float8Linear) for n in fp8.converted)
    assert not any(isinstance(modules[n], Float8Linear) for n in fp8.kept)
    assert "too small to gain" in fp8.kept["blocks.0.attn.proj"]
    assert "LM head stays BF16" in fp8.kept["lm_head"]
    # The audit's route, from the recipe's shapes alone, decides the same linears.
    assert fp8_plan(precision, recipe_linears(weight_shapes(r.model))) == (fp8.converted, fp8.kept)
    # The converted weights are still the arena's FP32 parameters: nothing was copied.
    assert modules["blocks.0.mlp.gate_up"].weight.dtype == torch.float32
    assert built.parameters == sum(p.numel() for p in built.model.parameters())


def test_dimensions_not_divisible_by_16_stay_bf16():
    built = build(recipe("fp8-tensorwise", "model.ffn_dim=580"), CPU, fp8_emulate=True)
    assert built.fp8.converted == []
    assert built.fp8.kept["blocks.0.mlp.gate_up"] == "1160x128: FP8 matmuls need both dimensions divisible by 16"


def test_rowwise_is_torchaos_rowwise_recipe_not_the_bare_configs_tensorwise():
    from tiny_llm.fp8 import float8_config

    rowwise, tensorwise = float8_config("fp8-rowwise", emulate=True), float8_config("fp8-tensorwise", emulate=True)
    assert rowwise.emulate and tensorwise.emulate
    assert rowwise.cast_config_input.scaling_granularity.value == "axiswise"
    assert tensorwise.cast_config_input.scaling_granularity.value == "tensorwise"


@pytest.mark.parametrize("precision", ["fp8-tensorwise", "fp8-rowwise"])
def test_emulated_fp8_trains_as_bf16_does(precision):
    losses = {}
    for p in ("bf16", precision):
        built = build(recipe(p, *SHAPES[precision]), CPU, fp8_emulate=True)
        # The loss after one update: the rowwise shape learns the repeated batch in a few updates
        # (6.53 to 0.94 in six), and by the third the two curves part by more than precision
        # explains (3.79 against 3.87 on an AMD EPYC's AVX2, within 1% on other CPUs).
        for _ in range(2):
            built.run()
        losses[p] = built.update.loss.item()
        assert built.optimizer.state_is_finite().item()
    assert losses[precision] < 0.95 * math.log(512)  # it learnt: below a uniform guess over the vocabulary
    assert abs(losses[precision] - losses["bf16"]) <= 0.01 * losses["bf16"]


def test_the_cpu_path_refuses_fp8_without_emulation():
    from tiny_llm.fp8 import Fp8Unavailable

    with pytest.raises(Fp8Unavailable, match="only on a CUDA GPU with FP8 matrix units"):
        build(recipe("fp8-tensorwise"), CPU)


def test_torchao_missing_is_named(monkeypatch):
    from tiny_llm.fp8 import torchao_missing

    assert torchao_missing() is None
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    assert "torchao's float8 training does not import" in torchao_missing()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--precision", "fp9"], "--precision 'fp9': unknown precision; use one of bf16, fp8-tensorwise, fp8-rowwise"),
        (["--precision", "fp8-rowwise"], "--precision fp8-rowwise trains only on a CUDA GPU"),
        (["--set", "training.precision=fp8-tensorwise"], "--precision fp8-tensorwise trains only on a CUDA GPU"),
    ],
)
def test_bad_precision_at_the_command_line_is_one_line_and_writes_nothing(tmp_path, capsys, args, said):
    out = tmp_path / "result.json"
    code = main(
        ["benchmark-throughput-worker", "--config", str(ROOT / "configs" / "tiny.yaml"), *args, "--output", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_campaign_point_asking_fp8_on_the_cpu_is_refused_not_failed(tmp_path, capsys):
    r = recipe("fp8-tensorwise")
    request = WorkerRequest(
        point=PointSpec(model="tiny", context_length=128, batch_size=2),
        recipe=r,
        protocol=msgspec.structs.replace(Protocol(warmup=2, windows=5, window_seconds=0.2), precision="fp8-tensorwise"),
        campaign=str(tmp_path),
        python=sys.executable,
        result=str(tmp_path / "result.json"),
    )
    path = write_atomic(tmp_path / "request.json", request)
    out = tmp_path / "result.json"
    code = main(["benchmark-throughput-worker", "--request", str(path), "--output", str(out), "--device", "cpu"])
    result = read(out, WorkerResult)
    assert code == EXIT_CODES["refused"] == result.exit_code
    assert outcome_kind(result.outcome) == "refused" and result.outcome.phase == "setup"
    assert "only on a CUDA GPU with FP8 matrix units" in result.outcome.reason and "bf16" in result.outcome.fix
    assert result.throughput is None and result.fp8 is None and result.protocol.precision == "fp8-tensorwise"
    assert "Traceback" not in capsys.readouterr().err


def test_model_linears_are_every_nn_linear_once():
    from tiny_llm.fp8 import model_linears
    from tiny_llm.model import build_model

    model = build_model(recipe("bf16").model)
    found = model_linears(model)
    assert len(found) == sum(isinstance(m, nn.Linear) for m in model.modules())  # the tied head once
    assert found == recipe_linears(weight_shapes(recipe("bf16").model))


def test_the_summary_line_names_bf16_equivalent_mfu_the_fp8_linears_and_the_fp8_peak(tmp_path):
    from throughput_schema import Fp8Linears
    from throughput_schema.gpus import GIB
    from tiny_llm.worker_cli import summary_line

    out = tmp_path / "result.json"
    fast = ["--warmup", "1", "--windows", "1", "--window-seconds", "0.1", "--min-updates-per-window", "1"]
    tiny = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--set", "model.vocab_size=512"]
    assert main(["benchmark-throughput-worker", *tiny, *fast, "--output", str(out), "--device", "cpu"]) == 0
    bf16 = read(out, WorkerResult)
    assert " MFU n/a" in summary_line(bf16, out) and "BF16-equivalent" not in summary_line(bf16, out)
    # The same figures as an H100's FP8 point: what the line says beside its MFU.
    fp8 = msgspec.structs.replace(
        bf16,
        recipe=recipe("fp8-tensorwise"),
        throughput=msgspec.structs.replace(bf16.throughput, mfu=0.63, peak_flops=989e12),
        hardware=msgspec.structs.replace(
            bf16.hardware, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_bytes=int(79.1 * GIB)
        ),
        fp8=Fp8Linears(
            recipe="tensorwise", converted=["blocks.0.mlp.gate_up"], kept={"lm_head": "", "blocks.0.mlp.down": ""}
        ),
    )
    line = summary_line(fp8, out)
    assert "BF16-equivalent MFU 63.0% (fp8-tensorwise: 1 of 3 linears in FP8; FP8 peak 1,978 TFLOP/s)" in line
