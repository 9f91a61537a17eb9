"""A model knob has one declaration (its annotated field of `ModelConfig`) and is otherwise
named only where it must be: the model code that builds it, the audit's independent formula,
the HF weight map and the kernels' eligibility. Every other module reads the table
(`throughput_schema.knobs`); this lists the source files each knob's name appears in."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import msgspec

from throughput_schema.configs import ModelConfig
from throughput_schema.knobs import KNOBS, NAMES, from_hf, knob_values

ROOT = Path(__file__).resolve().parents[3]
HOMES = {
    "packages/throughput-schema/src/throughput_schema/configs.py",  # the table
    "packages/throughput-schema/src/throughput_schema/knob_rules.py",  # the table's longer rules
    "packages/tiny-llm/src/tiny_llm/model.py",  # the model that builds it
    "packages/throughput-audit/src/throughput_audit/stats.py",  # the audit's own formula
    "packages/tiny-llm/src/tiny_llm/hf_weights.py",  # the HF weight map and model class
    "packages/tiny-llm/src/tiny_llm/kernels.py",  # which kernel cannot build it
}
# A knob spelled as transformers spells its config.json key: the HF import reads that key.
HF_KEYS = {
    "rope_scaling": {
        "packages/throughput-schema/src/throughput_schema/hf_config.py",
        "packages/throughput-schema/src/throughput_schema/hf_layers.py",
    },
    "sliding_window": {
        "packages/throughput-schema/src/throughput_schema/hf_config.py",
        "packages/throughput-schema/src/throughput_schema/hf_model_types.py",
        "packages/throughput-schema/src/throughput_schema/hf_layers.py",
    },
}


def source_files() -> list[str]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [
        path
        for path in tracked.stdout.split()
        if not path.startswith(("tests/", "docs/", "configs/"))
        and "/tests/" not in path
        and not path.endswith("conftest.py")
    ]


def test_each_knob_is_named_only_in_its_homes():
    texts = {path: (ROOT / path).read_text() for path in source_files()}
    assert "packages/tiny-llm/src/tiny_llm/model.py" in texts
    for name in NAMES:
        word = re.compile(rf"\b{name}\b")
        found = {path for path, text in texts.items() if word.search(text)}
        assert found <= HOMES | HF_KEYS.get(name, set()), f"{name} is named in {sorted(found - HOMES)}"


def test_the_table_is_the_record_s_knobs_in_field_order():
    fields = {f.name: f for f in msgspec.structs.fields(ModelConfig)}
    assert NAMES == (
        "n_kv_heads",
        "tie_embeddings",
        "qkv_bias",
        "qk_norm",
        "rope_scaling",
        "nope_layers",
        "qk_norm_whole",
        "post_norm",
        "sliding_window",
        "sliding_layers",
        "rope_local_theta",
        "norm_offset",
        "sandwich_norm",
        "mlp_activation",
        "embed_scale",
        "attn_scale_dim",
    )
    assert list(NAMES) == [name for name in fields if name in NAMES]
    for k in KNOBS:
        assert k.default == fields[k.name].default and k.knob.help
    model = ModelConfig(n_layers=1, d_model=8, n_heads=2, ffn_dim=4, context_length=128)
    assert knob_values(model) == {k.name: k.default for k in KNOBS}


def test_a_config_json_s_values_become_the_knobs_the_import_wrote_before():
    read = {"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 4}
    assert from_hf(read | {"tie_word_embeddings": True, "rope_scaling": None}) == {
        "tie_embeddings": True,
        "qkv_bias": True,
        "qk_norm": False,
    }
    scaling = {"type": "llama3", "factor": 8.0}
    read |= {"model_type": "llama", "num_key_value_heads": 2, "tie_word_embeddings": False, "rope_scaling": scaling}
    assert list(from_hf(read).items()) == [
        ("n_kv_heads", 2),
        ("tie_embeddings", False),
        ("qkv_bias", False),
        ("qk_norm", False),
        ("rope_scaling", scaling),
    ]
    # SmolLM3's per-layer flags (1 rotates) become the layers without RoPE; all 1 is the default.
    read |= {"model_type": "smollm3", "rope_scaling": None}
    assert from_hf(read | {"no_rope_layers": [1, 1, 1, 0, 1, 0]})["nope_layers"] == [3, 5]
    assert "nope_layers" not in from_hf(read | {"no_rope_layers": [1, 1]})
    # OLMo 2's norms are its class's, not its keys': set by the type, and absent from any other.
    assert from_hf(read | {"model_type": "olmo2"}) | {"qk_norm_whole": True, "post_norm": True} == from_hf(
        read | {"model_type": "olmo2"}
    )
    assert not {"qk_norm_whole", "post_norm"} & set(from_hf(read))


def test_q_and_k_are_normed_per_head_or_whole_not_both():
    from throughput_schema.knobs import problems

    both = ModelConfig(
        n_layers=1, d_model=8, n_heads=2, ffn_dim=4, context_length=128, qk_norm=True, qk_norm_whole=True
    )
    assert problems(both) == [
        "model.qk_norm and model.qk_norm_whole are both set: q and k are normed per head or whole, not both"
    ]


def test_nope_layers_must_be_layers_of_the_model_each_once_in_order():
    from throughput_schema.knobs import problems

    base = ModelConfig(n_layers=4, d_model=8, n_heads=2, ffn_dim=4, context_length=128)
    assert problems(msgspec.structs.replace(base, nope_layers=(1, 3))) == []
    for bad in ((4,), (3, 1), (1, 1), (-1,)):
        [why] = problems(msgspec.structs.replace(base, nope_layers=bad))
        assert why.startswith(f"model.nope_layers ({list(bad)}) must list layers of this model (0 to 3)")


def test_windowed_layers_need_a_window_and_must_be_layers_of_the_model():
    from throughput_schema.knobs import problems

    base = ModelConfig(n_layers=6, d_model=8, n_heads=2, ffn_dim=4, context_length=128)
    assert problems(msgspec.structs.replace(base, sliding_window=4, sliding_layers=(0, 4))) == []
    # A window no layer uses: every layer global, as `--set model.sliding_layers=[]` makes it.
    assert problems(msgspec.structs.replace(base, sliding_window=4)) == []
    assert problems(msgspec.structs.replace(base, sliding_layers=(0,))) == [
        "model.sliding_layers lists layers but model.sliding_window is not set: give the window in tokens"
    ]
    [why] = problems(msgspec.structs.replace(base, sliding_window=4, sliding_layers=(6,)))
    assert why.startswith("model.sliding_layers ([6]) must list layers of this model (0 to 5)")
