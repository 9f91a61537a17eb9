"""The precision setting: its values, its note beside a campaign's figures, the FP8 layer
filter as the worker and the audit both apply it, and the FP8 peak beside BF16-equivalent MFU."""

from pathlib import Path

import msgspec
import pytest

from throughput_schema import Protocol
from throughput_schema.gpus import GIB
from throughput_schema.precision import (
    fp8_kept_reason,
    fp8_plan,
    peak_fp8_flops,
    precision_deviation,
    recipe_linears,
    unknown_precision,
)
from throughput_schema.provenance import notes
from throughput_schema.recipe import at_point, load_recipe, override_args
from throughput_schema.shape import weight_shapes

ROOT = Path(__file__).resolve().parents[3]


def test_the_guides_precision_is_bf16_and_any_other_is_said():
    assert Protocol().precision == "bf16" and precision_deviation("bf16") is None
    assert precision_deviation("fp8-rowwise").startswith("precision differs from the guide: fp8-rowwise (guide: bf16)")
    assert unknown_precision("fp8-tensorwise") is None
    assert unknown_precision("fp8") == (
        "--precision 'fp8': unknown precision; use one of bf16, fp8-tensorwise, fp8-rowwise (default bf16)"
    )


def test_the_note_is_said_once_when_shared_and_per_campaign_when_not():
    fp8 = Protocol(precision="fp8-tensorwise")
    assert [n for n in notes([("A", fp8), ("B", fp8)], []) if "precision" in n] == [precision_deviation(fp8.precision)]
    assert notes([("A", Protocol()), ("B", fp8)], []) == [f"B: {precision_deviation(fp8.precision)}"]


def test_the_protocols_precision_is_every_points_and_a_bf16_recipe_passes_no_flag():
    recipe = load_recipe(ROOT / "configs" / "250m.yaml")
    at = at_point(recipe, context_length=2048, batch_size=8, protocol=Protocol(precision="fp8-rowwise"))
    assert at.training.precision == "fp8-rowwise"
    assert "training.precision=fp8-rowwise" in override_args(at)
    assert not any(a.startswith("training.precision") for a in override_args(recipe))  # frozen workers know no such key


def test_llama_1b_converts_every_block_linear_at_tensorwise_and_only_gate_up_at_rowwise():
    model = load_recipe(ROOT / "configs" / "llama-3.2-1b.yaml").model
    linears = recipe_linears(weight_shapes(model))
    tensorwise, kept = fp8_plan("fp8-tensorwise", linears)
    assert len(tensorwise) == 4 * model.n_layers == 64 and list(kept) == ["lm_head"]
    rowwise, kept = fp8_plan("fp8-rowwise", linears)
    assert len(rowwise) == model.n_layers and all(n.endswith("gate_up") for n in rowwise)
    assert "too small to gain from fp8-rowwise" in kept["blocks.0.mlp.down"]  # out 2048
    assert "too small to gain from fp8-rowwise" in kept["blocks.0.attn.proj"]


@pytest.mark.parametrize(
    "precision, out_in, converts",
    [
        ("fp8-tensorwise", (1024, 4096), False),  # torchao: not where in <= 4096 and out <= 1024
        ("fp8-tensorwise", (1040, 4096), True),
        ("fp8-tensorwise", (1024, 4112), True),
        ("fp8-tensorwise", (2056, 2056), False),  # not divisible by 16
        ("fp8-rowwise", (4096, 2048), False),
        ("fp8-rowwise", (4112, 2048), True),
        ("fp8-rowwise", (2048, 8192), False),
        ("fp8-rowwise", (2064, 1040), False),
        ("fp8-rowwise", (2064, 2064), True),
    ],
)
def test_the_filter_follows_torchaos_thresholds(precision, out_in, converts):
    assert (fp8_kept_reason(precision, "blocks.0.mlp.down", *out_in) is None) == converts


def test_the_fp8_peak_is_twice_the_bf16_peak_only_where_there_are_fp8_units():
    assert peak_fp8_flops("NVIDIA H100 80GB HBM3", int(79.1 * GIB)) == 2 * 989e12
    assert peak_fp8_flops("NVIDIA A100-SXM4-80GB", int(79.1 * GIB)) is None
    assert peak_fp8_flops("", 0) is None


def test_old_records_without_a_precision_read_as_bf16_and_write_back_whole():
    raw = {"micro_batch_size": 1, "batch_tokens": 128, "seed": 42, "grad_clip": 1.0, "autocast_dtype": "bfloat16"}
    from throughput_schema import TrainingConfig

    training = msgspec.convert(raw, TrainingConfig)
    assert training.precision == "bf16"
    assert msgspec.to_builtins(training) == {**raw, "precision": "bf16"}
