"""The presets under configs/ and the `--set` override rules."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from throughput_schema.configs import PROTOCOL_RECIPE_FIELDS, protocol_field
from throughput_schema.recipe import RecipeError, at_point, load_recipe, override_args, parameter_count, with_point
from throughput_schema.records import OptimizerConfig, Protocol, Recipe, TrainingConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
MUON_FIELDS = ("muon_momentum", "muon_nesterov", "muon_ns_steps", "muon_ns_coefficients", "muon_adjust_lr")


@pytest.mark.parametrize("name, exact", [("250m", 251_943_360), ("500m", 516_814_080)])
def test_large_presets_have_their_exact_counts(name, exact):
    assert parameter_count(load_recipe(CONFIGS / f"{name}.yaml").model) == exact


@pytest.mark.parametrize("name, nominal", [("20m", 20e6), ("50m", 50e6), ("90m", 90e6)])
def test_small_presets_are_within_ten_percent_and_llama_shaped(name, nominal):
    model = load_recipe(CONFIGS / f"{name}.yaml").model
    assert abs(parameter_count(model) / nominal - 1) < 0.10
    assert model.ffn_dim % 64 == 0 and abs(model.ffn_dim / model.d_model - 8 / 3) < 0.2
    assert model.vocab_size == 32_000 and model.head_dim == 64


def test_guide_overrides_resolve():
    recipe = load_recipe(
        CONFIGS / "250m.yaml",
        [
            "model.context_length=2048",
            "training.micro_batch_size=8",
            "training.batch_tokens=16384",
            "optimizer.lr=0.001",
            "optimizer.beta2=0.99",
        ],
    )
    assert (recipe.model.context_length, recipe.training.micro_batch_size, recipe.optimizer.beta2) == (2048, 8, 0.99)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.context_lenght=2048", "unknown key 'model.context_lenght'"),
        ("trainer.micro_batch_size=2", "unknown section 'trainer'"),
        ("model.context_length=long", r"Expected `int`, got `str` - at `\$.model.context_length`"),
        ("training.micro_batch_size=0", r"Expected `int` >= 1|Expected `int` > 0"),
        ("training.micro_batch_size=-4", r"Expected `int` >= 1|Expected `int` > 0"),
        ("training.micro_batch_size=8", "must equal training.micro_batch_size x model.context_length"),
        ("model.context_length=1000", "not supported"),
        ("context_length", "expected SECTION.KEY=VALUE"),
    ],
)
def test_bad_overrides_fail_with_one_line(override, message):
    with pytest.raises(RecipeError, match=message) as info:
        load_recipe(CONFIGS / "250m.yaml", [override])
    assert "\n" not in str(info.value)


def test_malformed_yaml_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  n_layers: [1,\n")
    with pytest.raises(RecipeError, match="malformed YAML at line"):
        load_recipe(bad)


@pytest.mark.parametrize(
    "content, words",
    [
        (bytes(range(128, 256)) * 2 + b"\x00" * 44, "not UTF-8 text (byte 0x80 at offset 0)"),
        ("model:\n  name: café\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 18)"),
        ("name: café".encode()[:-1], "ends inside a character"),
    ],
    ids=["binary", "latin-1", "cut-off"],
)
def test_a_config_that_is_not_utf8_text_is_one_line(tmp_path, content, words):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    with pytest.raises(RecipeError) as info:
        load_recipe(bad)
    assert str(info.value).startswith(f"{bad}: ") and words in str(info.value) and "\n" not in str(info.value)


def test_a_record_that_is_not_utf8_text_is_named_so():
    from throughput_schema import SchemaError, WorkerResult, decode

    with pytest.raises(SchemaError, match=r"^r.json: not UTF-8 text \(byte 0xff at offset 8\)"):
        decode(b'{"a": "x\xff"}', WorkerResult, source="r.json")
    # A file cut inside a character is a truncated file, not an encoding problem.
    with pytest.raises(SchemaError, match="truncated"):
        decode('{"a": "é'.encode()[:-1], WorkerResult, source="r.json")


def test_with_point_applies_the_campaign_protocol_and_round_trips_through_overrides():
    base = load_recipe(CONFIGS / "90m.yaml")
    point = with_point(base, context_length=1024, batch_size=32, protocol=Protocol(lr=0.002))
    assert point.training.batch_tokens == 32 * 1024 and point.optimizer.lr == 0.002
    assert load_recipe(CONFIGS / "90m.yaml", override_args(point)) == point


def test_muon_settings_round_trip_through_overrides_and_stay_off_the_command_line_at_their_defaults():
    base = load_recipe(CONFIGS / "90m.yaml")
    plain = with_point(base, context_length=1024, batch_size=4, protocol=Protocol(optimizer="muon"))
    # A worker frozen before Muon refuses keys it does not know: defaults are not passed.
    assert not [a for a in override_args(plain) if a.startswith("optimizer.muon_")]
    assert "optimizer.name=muon" in override_args(plain)
    changed = Protocol(optimizer="muon", muon_momentum=0.9, muon_nesterov=False, muon_ns_coefficients=(3.0, -4.0, 2.0))
    point = with_point(base, context_length=1024, batch_size=4, protocol=changed)
    assert load_recipe(CONFIGS / "90m.yaml", override_args(point)) == point


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("optimizer.name=sgd", "Invalid enum value 'sgd' - at `$.optimizer.name`; use one of adamw, muon"),
        ("optimizer.muon_momentum=1.0", "Expected `float` < 1.0"),
        ("optimizer.muon_momentum=-0.1", "Expected `float` >= 0.0"),
        ("optimizer.muon_ns_steps=0", "Expected `int` >= 1"),
        ("optimizer.muon_adjust_lr=x", "`$.optimizer.muon_adjust_lr`; use one of match_rms_adamw, original"),
        ("training.precision=fp9", "`$.training.precision`; use one of bf16, fp8-tensorwise, fp8-rowwise"),
        ("model.qk_norm=maybe", "`$.model.qk_norm`; use true or false"),
    ],
)
def test_bad_settings_are_one_line_naming_the_allowed_values(override, reason):
    with pytest.raises(RecipeError) as info:
        load_recipe(CONFIGS / "90m.yaml", [override])
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_the_protocol_sets_the_recipe_fields_it_names_and_starts_from_their_defaults():
    assert PROTOCOL_RECIPE_FIELDS == {
        "training": ("seed", "grad_clip", "precision"),
        "optimizer": ("name", "lr", "beta1", "beta2", "eps", "weight_decay", *MUON_FIELDS),
    }
    protocol_types = {f.name: f.type for f in msgspec.structs.fields(Protocol)}
    protocol_defaults = {f.name: f.default for f in msgspec.structs.fields(Protocol)}
    for section, config in (("training", TrainingConfig), ("optimizer", OptimizerConfig)):
        for f in msgspec.structs.fields(config):
            if f.name in PROTOCOL_RECIPE_FIELDS[section]:
                name = protocol_field(section, f.name)
                assert protocol_types[name] == f.type, f"{section}.{f.name}: the protocol accepts other values"
                assert protocol_defaults[name] == f.default, f"{section}.{f.name}: the protocol starts elsewhere"
    recipe = load_recipe(CONFIGS / "20m.yaml")
    plain = Recipe(
        name="plain",
        model=recipe.model,
        training=TrainingConfig(micro_batch_size=1, batch_tokens=recipe.model.context_length),
    )
    # A campaign with the default protocol measures a plain recipe as written.
    assert at_point(plain, context_length=512, batch_size=1, protocol=Protocol()) == at_point(
        plain, context_length=512, batch_size=1
    )


def test_at_point_sets_every_field_the_protocol_names_without_validating():
    muon = dict(muon_momentum=0.5, muon_nesterov=False, muon_ns_steps=3, muon_ns_coefficients=(1.0, 2.0, 3.0))
    protocol = Protocol(
        lr=0.5, beta1=0.5, beta2=0.5, eps=0.5, weight_decay=0.5, grad_clip=0.5, seed=5, optimizer="muon", **muon
    )
    # Context 300 is no supported context: the audit compares such a point, it does not refuse it.
    point = at_point(load_recipe(CONFIGS / "20m.yaml"), context_length=300, batch_size=3, protocol=protocol)
    assert (point.model.context_length, point.training.batch_tokens) == (300, 900)
    for section, names in PROTOCOL_RECIPE_FIELDS.items():
        for name in names:
            expected = getattr(protocol, protocol_field(section, name))
            assert getattr(getattr(point, section), name) == expected, f"{section}.{name}"
