"""Hugging Face config.json files read as recipes: the published models, transformers 5's
form, each model type's defaults, and every refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from throughput_schema.configs import Llama3RopeScaling
from throughput_schema.hf_config import HfConfigError, import_config
from throughput_schema.recipe import RecipeError, load_recipe, parameter_count, recipe_from_dict

HF = Path(__file__).resolve().parent / "hf_configs"
CONFIGS = Path(__file__).resolve().parents[3] / "configs"

PUBLISHED = [
    ("SmolLM2-135M", 134_515_008),
    ("TinyLlama-1.1B-Chat-v1.0", 1_100_048_384),
    ("Llama-3.2-1B", 1_235_814_400),
    ("Qwen2.5-0.5B", 494_032_768),
    ("Qwen3-0.6B", 596_049_920),
]


# SmolLM3-3B's config.json (HuggingFaceTB/SmolLM3-3B) as far as it is read here: its shape, RoPE,
# tying and per-layer NoPE flags (1, 1, 1, 0 repeated); published count 3,075,098,624.
SMOLLM3 = {
    "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 4, "vocab_size": 128256, "max_position_embeddings": 65536, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 5000000.0, "tie_word_embeddings": True, "use_sliding_window": False,
    "sliding_window": None, "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0] * 9,
}  # fmt: skip


# OLMo-2-0425-1B's config.json (allenai/OLMo-2-0425-1B) as far as it is read here; published
# count 1,484,916,736.
OLMO2 = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
    "vocab_size": 100352, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 500000, "tie_word_embeddings": False, "attention_bias": False,
}  # fmt: skip


# Gemma 3 1B's config.json (google/gemma-3-1b-pt) as far as it is read here, in transformers 4's
# spelling (sliding_window_pattern, rope_local_base_freq); published count 999,885,952.
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "rope_local_base_freq": 10000,
    "sliding_window": 512, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "eos_token_id": [1, 106],
}  # fmt: skip
# Gemma 3 270M's (google/gemma-3-270m) in transformers 5's spelling: layer_types and rope_parameters
# per layer type; published count 268,098,176.
GEMMA3_270M = {
    **GEMMA3_1B, "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 5 + ["full_attention"]
    + ["sliding_attention"] * 5 + ["full_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    "use_bidirectional_attention": False,
}  # fmt: skip
for key in ("rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window_pattern"):
    del GEMMA3_270M[key]


def config(model: str) -> dict:
    return json.loads((HF / model / "config.json").read_text())


def write(tmp_path: Path, data: dict | str, folder: str = "my-model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def recipe_of(path: Path, name: str | None = None):
    imported = import_config(path, name=name)
    return recipe_from_dict(imported.raw, source=str(path)), imported


@pytest.mark.parametrize("model, published", PUBLISHED)
def test_published_configs_give_the_published_parameter_counts(model, published):
    recipe, imported = recipe_of(HF / model / "config.json")
    assert parameter_count(recipe.model) == published
    assert recipe.name == model and imported.renamed_from is None
    # load_recipe takes the file directly (describe, the sweep's --models), with the same result.
    assert load_recipe(HF / model / "config.json") == recipe


@pytest.mark.parametrize("data, preset", [(GEMMA3_1B, "gemma-3-1b"), (GEMMA3_270M, "gemma-3-270m")])
def test_gemma3_is_its_preset_in_either_spelling(tmp_path, data, preset):
    recipe, imported = recipe_of(write(tmp_path, data, preset))
    assert msgspec.structs.replace(recipe, name=preset) == load_recipe(CONFIGS / f"{preset}.yaml")
    assert imported.config_class == "Gemma3TextConfig"
    m = recipe.model
    assert (m.sliding_window, m.rope_local_theta, m.rope_theta, m.mlp_activation) == (512, 1e4, 1e6, "gelu_tanh")
    assert m.sliding_layers == tuple(i for i in range(m.n_layers) if i % 6 != 5)
    assert (m.norm_offset, m.sandwich_norm, m.embed_scale, m.qk_norm, m.attn_scale_dim) == (
        True,
        True,
        True,
        True,
        None,
    )


def test_gemma3_s_class_defaults_and_its_own_attention_scale(tmp_path):
    # Gemma3TextConfig's defaults: the pattern of 6, the window of 4096, bases 1e6 and 1e4.
    bare = {k: v for k, v in GEMMA3_1B.items() if k not in (
        "sliding_window", "sliding_window_pattern", "rope_theta", "rope_local_base_freq", "query_pre_attn_scalar")}  # fmt: skip
    got, imported = recipe_of(write(tmp_path, bare, "g"))
    assert (got.model.sliding_window, got.model.rope_theta, got.model.rope_local_theta) == (4096, 1e6, 1e4)
    assert got.model.sliding_layers == tuple(i for i in range(26) if i % 6 != 5)
    assert "sliding_window_pattern=6" in imported.defaults and "query_pre_attn_scalar=256" in imported.defaults
    scaled, _ = recipe_of(write(tmp_path, GEMMA3_1B | {"query_pre_attn_scalar": 144}, "s"))
    assert scaled.model.attn_scale_dim == 144
    # Every layer global: no window, no second base in the recipe.
    flat, imported = recipe_of(write(tmp_path, GEMMA3_270M | {"layer_types": ["full_attention"] * 18}, "f"))
    assert (flat.model.sliding_layers, flat.model.sliding_window, flat.model.rope_local_theta) == ((), None, None)
    assert "sliding_layers" not in imported.raw["model"]


def test_each_model_type_decides_what_no_key_says():
    smol, _ = recipe_of(HF / "SmolLM2-135M/config.json")
    assert (smol.model.n_heads, smol.model.kv_heads, smol.model.head_dim, smol.model.tie_embeddings) == (9, 3, 64, True)
    assert (smol.model.rope_theta, smol.model.norm_eps, smol.model.vocab_size) == (100_000.0, 1e-5, 49_152)
    tiny, _ = recipe_of(HF / "TinyLlama-1.1B-Chat-v1.0/config.json")
    assert (tiny.model.kv_heads, tiny.model.tie_embeddings) == (4, False)
    qwen2, _ = recipe_of(HF / "Qwen2.5-0.5B/config.json")
    assert (qwen2.model.qkv_bias, qwen2.model.qk_norm, qwen2.model.kv_heads) == (True, False, 2)
    qwen3, _ = recipe_of(HF / "Qwen3-0.6B/config.json")
    assert (qwen3.model.qkv_bias, qwen3.model.qk_norm, qwen3.model.head_dim) == (False, True, 128)
    llama, _ = recipe_of(HF / "Llama-3.2-1B/config.json")
    assert llama.model.rope_theta == 500_000.0
    assert llama.model.rope_scaling == Llama3RopeScaling(
        factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    # The protocol's training settings and a context that --contexts replaces; the file's
    # max_position_embeddings is recorded, not used.
    assert (llama.model.context_length, llama.training.micro_batch_size, llama.optimizer.lr) == (2048, 4, 1e-3)


@pytest.mark.parametrize(
    "model, preset",
    [
        ("SmolLM2-135M", "smollm2-135m"),
        ("TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"),
        ("Llama-3.2-1B", "llama-3.2-1b"),
        ("Qwen2.5-0.5B", "qwen2.5-0.5b"),
        ("Qwen3-0.6B", "qwen3-0.6b"),
    ],
)
def test_a_converted_config_is_its_preset_by_another_name(model, preset):
    """The presets in configs/ were written by hand from the same files: two routes, one recipe."""
    converted = load_recipe(HF / model / "config.json")
    assert msgspec.structs.replace(converted, name=preset) == load_recipe(CONFIGS / f"{preset}.yaml")


def test_smollm3_is_its_preset_with_its_nope_layers(tmp_path):
    recipe, imported = recipe_of(write(tmp_path, SMOLLM3, "SmolLM3-3B"))
    assert parameter_count(recipe.model) == 3_075_098_624 and imported.config_class == "SmolLM3Config"
    assert msgspec.structs.replace(recipe, name="smollm3-3b") == load_recipe(CONFIGS / "smollm3-3b.yaml")
    assert recipe.model.nope_layers == (3, 7, 11, 15, 19, 23, 27, 31, 35)
    # Without the flags, SmolLM3Config derives them from no_rope_layer_interval (4 by default).
    derived = {k: v for k, v in SMOLLM3.items() if k not in ("no_rope_layers", "no_rope_layer_interval")}
    got, imported = recipe_of(write(tmp_path, derived, "SmolLM3-3B"))
    assert got == recipe and "no_rope_layer_interval=4" in imported.defaults
    every_third = recipe_of(write(tmp_path, derived | {"no_rope_layer_interval": 3}, "SmolLM3-3B"))[0]
    assert every_third.model.nope_layers == tuple(range(2, 36, 3))
    # transformers 5's spelling, and a file without a layer lacking RoPE: the default, no knob.
    v5 = {k: v for k, v in SMOLLM3.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000000.0}
    assert recipe_of(write(tmp_path, v5, "SmolLM3-3B"))[0] == recipe
    everywhere, imported = recipe_of(write(tmp_path, SMOLLM3 | {"no_rope_layers": [1] * 36}, "SmolLM3-3B"))
    assert everywhere.model.nope_layers == () and "nope_layers" not in imported.raw["model"]


def test_olmo2_is_its_preset_with_its_norms(tmp_path):
    recipe, imported = recipe_of(write(tmp_path, OLMO2, "OLMo-2-0425-1B"))
    assert parameter_count(recipe.model) == 1_484_916_736 and imported.config_class == "Olmo2Config"
    assert msgspec.structs.replace(recipe, name="olmo-2-1b") == load_recipe(CONFIGS / "olmo-2-1b.yaml")
    assert (recipe.model.post_norm, recipe.model.qk_norm_whole, recipe.model.qk_norm) == (True, True, False)
    # Olmo2Config's defaults: as many kv heads as heads, eps 1e-5, untied.
    bare = {k: v for k, v in OLMO2.items() if k not in ("num_key_value_heads", "rms_norm_eps", "tie_word_embeddings")}
    got, imported = recipe_of(write(tmp_path, bare, "o"))
    assert (got.model.n_kv_heads, got.model.norm_eps, got.model.tie_embeddings) == (None, 1e-5, False)
    assert "rms_norm_eps=1e-05" in imported.defaults


def test_transformers_5_rope_parameters_read_as_transformers_4(tmp_path):
    for model in ("Llama-3.2-1B", "Qwen3-0.6B", "SmolLM2-135M"):
        old = config(model)
        new = {k: v for k, v in old.items() if k not in ("rope_theta", "rope_scaling", "torch_dtype")}
        new["rope_parameters"] = {
            **(old.get("rope_scaling") or {"rope_type": "default"}),
            "rope_theta": old["rope_theta"],
        }
        new["dtype"] = "bfloat16"
        new["layer_types"] = ["full_attention"] * old["num_hidden_layers"]
        expected, _ = recipe_of(HF / model / "config.json")
        got, _ = recipe_of(write(tmp_path, new, model))
        assert got == expected, model
    # The older spelling of the type, {"type": "llama3"}, too.
    old = config("Llama-3.2-1B")
    old["rope_scaling"] = {("type" if k == "rope_type" else k): v for k, v in old["rope_scaling"].items()}
    assert recipe_of(write(tmp_path, old, "Llama-3.2-1B"))[0] == recipe_of(HF / "Llama-3.2-1B/config.json")[0]


def test_missing_keys_take_their_classes_defaults_and_say_so(tmp_path):
    llama = config("TinyLlama-1.1B-Chat-v1.0")
    for key in ("tie_word_embeddings", "num_key_value_heads", "rope_theta", "rms_norm_eps", "vocab_size"):
        del llama[key]
    recipe, imported = recipe_of(write(tmp_path, llama))
    # LlamaConfig: untied, as many kv heads as heads, theta 10000, eps 1e-6, 32000 tokens.
    assert recipe.model.tie_embeddings is False and recipe.model.n_kv_heads is None
    assert (recipe.model.rope_theta, recipe.model.norm_eps, recipe.model.vocab_size) == (10_000.0, 1e-6, 32_000)
    assert "tie_word_embeddings=False" in imported.defaults
    assert "num_key_value_heads=32 (num_attention_heads)" in imported.defaults
    assert "head_dim=64 (hidden_size // num_attention_heads)" in imported.defaults

    qwen3 = config("Qwen3-0.6B")
    del qwen3["head_dim"], qwen3["tie_word_embeddings"]
    recipe, imported = recipe_of(write(tmp_path, qwen3, "q3"))
    assert (recipe.model.head_dim, recipe.model.tie_embeddings) == (128, False)  # Qwen3Config's, not 1024 // 16
    assert imported.defaults == ("head_dim=128", "tie_word_embeddings=False")

    qwen2 = config("Qwen2.5-0.5B")
    qwen2["num_attention_heads"], qwen2["hidden_size"] = 32, 2048
    del qwen2["num_key_value_heads"]
    recipe, imported = recipe_of(write(tmp_path, qwen2, "q2"))
    assert recipe.model.kv_heads == 32 and "num_key_value_heads=32" in imported.defaults  # Qwen2Config's 32

    mistral = {**config("TinyLlama-1.1B-Chat-v1.0"), "model_type": "mistral", "sliding_window": None}
    del mistral["num_key_value_heads"]
    recipe, _ = recipe_of(write(tmp_path, mistral, "m"))
    assert recipe.model.kv_heads == 8  # MistralConfig's 8


def test_the_yaml_states_the_count_and_the_defaults_and_reads_back(tmp_path):
    source = HF / "SmolLM2-135M/config.json"
    out = tmp_path / "smol.yaml"
    done = schema_cli("recipe-from-hf", str(source), "--output", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    first, second = text.splitlines()[:2]
    assert first.startswith("# 134,515,008 parameters: SmolLM2-135M, converted from")
    assert "LlamaConfig defaults: head_dim=64 (hidden_size // num_attention_heads)" in second
    assert "max_position_embeddings 8192 is recorded, not used" in text
    assert load_recipe(out) == load_recipe(source)
    printed = schema_cli("recipe-from-hf", str(source))
    assert printed.returncode == 0 and printed.stdout == text


def test_names_come_from_name_or_the_folder(tmp_path, capsys):
    data = config("Qwen3-0.6B")
    recipe, imported = recipe_of(write(tmp_path, data, "my model (v2)"))
    assert recipe.name == "my_model_v2" and imported.renamed_from == "my model (v2)"
    assert recipe_of(write(tmp_path, data, "x"), name="qwen3-0.6b")[0].name == "qwen3-0.6b"
    # A Hugging Face cache's snapshot folder is a revision: the repository names the model.
    cached = tmp_path / "hub/models--Qwen--Qwen3-0.6B/snapshots/0123abcd"
    assert recipe_of(write(cached, data, "."))[0].name == "Qwen3-0.6B"
    with pytest.raises(HfConfigError, match="--name .a b.: a model name holds ASCII letters"):
        import_config(HF / "Qwen3-0.6B/config.json", name="a b")
    done = schema_cli("recipe-from-hf", str(write(tmp_path, data, "my model (v2)")))
    assert done.returncode == 0 and "model name 'my_model_v2' (its folder 'my model (v2)'" in done.stderr


def _set(base: str, **changes):
    data = config(base)
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return data


_DROP = object()
REFUSALS = [
    (_set("Qwen3-0.6B", model_type="gemma"), "model_type 'gemma' is not built here"),
    (_set("Qwen3-0.6B", model_type="qwen3_moe", num_experts=128), "model_type 'qwen3_moe' is not built here"),
    (_set("TinyLlama-1.1B-Chat-v1.0", num_local_experts=8), "num_local_experts is 8: a mixture of experts"),
    (_set("Qwen2.5-0.5B", moe_intermediate_size=768), "moe_intermediate_size is 768: a mixture of experts"),
    (_set("SmolLM2-135M", intermediate_size=[1536] * 30), "intermediate_size is a per-layer array"),
    (_set("SmolLM2-135M", num_key_value_heads=[3, 3]), "num_key_value_heads is a per-layer array"),
    (_set("SmolLM2-135M", no_rope_layers=[1] * 30), "no_rope_layers is a per-layer array"),
    (_set("SmolLM2-135M", attention_bias=True), "attention_bias is true: it adds biases to every attention"),
    (_set("Qwen2.5-0.5B", attention_bias=True), "attention_bias is true"),
    (_set("Llama-3.2-1B", mlp_bias=True), "mlp_bias is true"),
    (
        _set("SmolLM2-135M", hidden_act="gelu"),
        "hidden_act is 'gelu'; the decoder's gated MLP gates with silu or gelu_pytorch_tanh only",
    ),
    (_set("Qwen2.5-0.5B", use_sliding_window=True), "use_sliding_window is true"),
    (_set("Qwen3-0.6B", use_sliding_window=True, sliding_window=4096), "use_sliding_window is true"),
    (
        _set("TinyLlama-1.1B-Chat-v1.0", model_type="mistral", sliding_window=4096),
        "sliding_window is 4096: a sliding attention window is not built",
    ),
    (_set("TinyLlama-1.1B-Chat-v1.0", model_type="mistral"), "sliding_window is 4096 (MistralConfig's default)"),
    (
        _set("Qwen3-0.6B", layer_types=["full_attention"] * 27 + ["sliding_attention"]),
        "layer_types[27] is 'sliding_attention': a sliding attention window is not built",
    ),
    (
        _set("Qwen3-0.6B", layer_types=["full_attention"] * 27),
        "layer_types has 27 entries for 28 layers; one per layer",
    ),
    (SMOLLM3 | {"no_rope_layers": [1, 1, 1, 0] * 8}, "no_rope_layers has 32 entries for 36 layers; one per layer"),
    (SMOLLM3 | {"no_rope_layers": [1, 1, 1, 0] * 10}, "no_rope_layers has 40 entries for 36 layers"),
    (SMOLLM3 | {"no_rope_layers": [1, 2] * 18}, "no_rope_layers is [1, 2, 1, 2"),
    (SMOLLM3 | {"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window is true"),
    (SMOLLM3 | {"hidden_act": "gelu"}, "hidden_act is 'gelu'"),
    (SMOLLM3 | {"num_local_experts": 8}, "num_local_experts is 8: a mixture of experts"),
    (OLMO2 | {"attention_bias": True}, "attention_bias is true"),
    (OLMO2 | {"hidden_act": "gelu"}, "hidden_act is 'gelu'"),
    (OLMO2 | {"num_experts": 64, "num_experts_per_tok": 8}, "num_experts is 64: a mixture of experts"),
    (OLMO2 | {"layer_types": ["full_attention"] * 15}, "layer_types has 15 entries for 16 layers"),
    (OLMO2 | {"no_rope_layers": [1] * 16}, "no_rope_layers is a per-layer array"),
    (GEMMA3_1B | {"use_bidirectional_attention": True}, "use_bidirectional_attention is true: the decoder attends"),
    (GEMMA3_1B | {"final_logit_softcapping": 30.0}, "final_logit_softcapping is 30.0: soft-capping is not built"),
    (GEMMA3_1B | {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping is 50.0: soft-capping is not built"),
    (GEMMA3_1B | {"hidden_activation": "gelu"}, "hidden_activation is 'gelu'; the decoder's gated MLP gates"),
    (GEMMA3_1B | {"num_experts": 8}, "num_experts is 8: a mixture of experts"),
    (
        GEMMA3_1B | {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
        "rope_scaling is {'rope_type': 'linear', 'factor': 8.0}: Gemma's RoPE scaling is not built",
    ),
    (
        GEMMA3_270M | {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}}},
        "rope_parameters.full_attention.rope_type is 'linear': Gemma's RoPE scaling is not built",
    ),
    (
        GEMMA3_270M | {"layer_types": ["sliding_attention"] * 17 + ["chunked_attention"]},
        "layer_types[17] is 'chunked_attention': only full_attention and sliding_attention layers are built",
    ),
    (GEMMA3_270M | {"layer_types": ["full_attention"] * 17}, "layer_types has 17 entries for 18 layers; one per layer"),
    (GEMMA3_1B | {"sliding_window": 0}, "sliding_window is 0; it must be a positive whole number"),
    (_set("SmolLM2-135M", hidden_size=_DROP), "hidden_size is missing"),
    (_set("SmolLM2-135M", model_type=_DROP), "model_type is missing"),
    (_set("SmolLM2-135M", num_hidden_layers="30"), "num_hidden_layers is '30'; it must be a positive whole number"),
    (_set("SmolLM2-135M", tie_word_embeddings="yes"), "tie_word_embeddings is 'yes'; it must be true or false"),
    (
        _set("SmolLM2-135M", rope_scaling={"rope_type": "yarn", "factor": 4.0}),
        "rope_scaling.rope_type is 'yarn'; only Llama 3's scaling (llama3) is built",
    ),
    (
        _set("Llama-3.2-1B", rope_scaling={"rope_type": "llama3", "factor": 32.0}),
        "rope_scaling.low_freq_factor is None; Llama 3 scaling needs a positive number",
    ),
    (
        _set("SmolLM2-135M", rope_parameters={"full_attention": {"rope_type": "default"}, "sliding_attention": {}}),
        "rope_parameters is given per layer type",
    ),
    (_set("SmolLM2-135M", partial_rotary_factor=0.5), "partial_rotary_factor is 0.5"),
    (_set("SmolLM2-135M", hidden_size=577, num_attention_heads=9), "hidden_size (577) is not a multiple"),
    (_set("Qwen3-0.6B", num_key_value_heads=5), "model.n_kv_heads (5) must divide model.n_heads (16)"),
    ("{not json", "not JSON at line 1, column 2"),
    ("[1, 2]", "not a model's config.json"),
]


@pytest.mark.parametrize("data, message", REFUSALS, ids=[m.split(";")[0][:40] for _, m in REFUSALS])
def test_refusals_are_one_line_naming_the_key_and_write_nothing(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises((HfConfigError, RecipeError), match=_escape(message)) as info:
        recipe_of(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    out = tmp_path / "recipe.yaml"
    out.write_text("kept\n")
    done = schema_cli("recipe-from-hf", str(path), "--output", str(out))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert out.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == ["my-model", "recipe.yaml"]


def test_qwen2_5s_switched_off_window_is_not_a_sliding_window():
    data = config("Qwen2.5-0.5B")
    assert data["sliding_window"] == 32768 and data["use_sliding_window"] is False
    assert recipe_of(HF / "Qwen2.5-0.5B/config.json")[0].model.n_layers == 24


def test_missing_or_unreadable_file(tmp_path):
    done = schema_cli("recipe-from-hf", str(tmp_path / "nope.json"))
    assert done.returncode == 2 and done.stderr.strip().endswith("nope.json: file not found")
    (tmp_path / "bin.json").write_bytes(b"\x00\x01\x02")
    done = schema_cli("recipe-from-hf", str(tmp_path / "bin.json"))
    assert done.returncode == 2 and "not JSON" in done.stderr and len(done.stderr.splitlines()) == 1


def schema_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "throughput_schema.cli", *args], capture_output=True, text=True, timeout=60
    )


def _escape(message: str) -> str:
    import re

    return re.escape(message)
