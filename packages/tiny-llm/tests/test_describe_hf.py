"""`python -m tiny_llm describe --config CONFIG_JSON`: a Hugging Face config.json as a recipe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
QWEN3 = ROOT / "packages/throughput-schema/tests/hf_configs/Qwen3-0.6B/config.json"


def describe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tiny_llm", "describe", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def config_json(tmp_path: Path, folder: str, data: dict) -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


def described(tmp_path: Path, folder: str, data: dict) -> tuple[int, dict]:
    """The parameter count and the recipe's model section `describe` prints for `data`."""
    done = describe("--config", str(config_json(tmp_path, folder, data)))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    return payload["parameters"], payload["recipe"]["model"]


def refused(tmp_path: Path, folder: str, data: dict) -> list[str]:
    """What `describe` says of `data` it refuses (exit 2, no traceback), line by line."""
    done = describe("--config", str(config_json(tmp_path, folder, data)))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()


def test_describe_takes_a_config_json_and_says_what_it_decided():
    done = describe(
        "--config", str(QWEN3), "--set", "model.context_length=4096", "--set", "training.batch_tokens=16384"
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["parameters"] == 596_049_920
    model = payload["recipe"]["model"]
    assert (model["context_length"], model["head_dim"], model["n_kv_heads"], model["qk_norm"]) == (4096, 128, 8, True)
    assert payload["recipe"]["name"] == "Qwen3-0.6B"
    source = payload["converted_from"]
    assert (source["model_type"], source["max_position_embeddings"], source["defaults_used"]) == ("qwen3", 40960, [])


def test_describe_refuses_an_unbuildable_config_in_one_line(tmp_path):
    data = json.loads(QWEN3.read_text())
    data["use_sliding_window"] = True
    bad = tmp_path / "Qwen3-sliding" / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(data))
    done = describe("--config", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"tiny_llm: {bad}: use_sliding_window is true: a sliding attention window is not built"
    ]


def test_a_recipe_written_as_json_is_still_a_recipe(tmp_path):
    """A frozen recipe (frozen/recipes/<model>.json) is JSON too, and reads as it always did."""
    from throughput_schema import write_atomic
    from throughput_schema.recipe import load_recipe

    frozen = write_atomic(tmp_path / "250m.json", load_recipe(ROOT / "configs/250m.yaml"))
    done = describe("--config", str(frozen))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["parameters"] == 251_943_360 and "converted_from" not in payload


def test_describe_takes_smollm3_and_refuses_flags_for_other_layers(tmp_path):
    """SmolLM3-3B's shape with its NoPE flags (1, 1, 1, 0 repeated) as its config.json writes them."""
    data = {
        "model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256, "rope_theta": 5000000.0,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": True, "no_rope_layers": [1, 1, 1, 0] * 9,
    }  # fmt: skip
    good = config_json(tmp_path, "SmolLM3-3B", data)
    done = describe("--config", str(good))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["parameters"] == 3_075_098_624
    assert payload["recipe"]["model"]["nope_layers"] == [3, 7, 11, 15, 19, 23, 27, 31, 35]
    bad = config_json(tmp_path, "short", data | {"no_rope_layers": [1, 1, 1, 0] * 8})
    done = describe("--config", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"tiny_llm: {bad}: no_rope_layers has 32 entries for 36 layers; one per layer"
    ]


def test_describe_takes_olmo2_and_refuses_an_output_bias(tmp_path):
    """OLMo-2-0425-1B's shape as its config.json writes it."""
    data = {
        "model_type": "olmo2", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 100352, "rope_theta": 500000,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "attention_bias": False,
    }  # fmt: skip
    parameters, model = described(tmp_path, "OLMo-2-0425-1B", data)
    assert parameters == 1_484_916_736 and (model["post_norm"], model["qk_norm_whole"]) == (True, True)
    [line] = refused(tmp_path, "biased", data | {"attention_bias": True})
    assert "attention_bias is true" in line


def test_describe_takes_gemma3_and_refuses_bidirectional_attention(tmp_path):
    """Gemma 3 1B's shape as its config.json writes it (transformers 4's spelling)."""
    data = {
        "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
        "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256, "vocab_size": 262144, "rope_theta": 1000000, "rope_local_base_freq": 10000,
        "sliding_window": 512, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    }  # fmt: skip
    parameters, model = described(tmp_path, "gemma-3-1b-pt", data)
    assert parameters == 999_885_952 and (model["sliding_window"], model["mlp_activation"]) == (512, "gelu_tanh")
    assert model["sliding_layers"] == [i for i in range(26) if i % 6 != 5]
    bad = tmp_path / "bidirectional" / "config.json"
    assert refused(tmp_path, "bidirectional", data | {"use_bidirectional_attention": True}) == [
        f"tiny_llm: {bad}: use_bidirectional_attention is true: the decoder attends causally, as a causal LM trains"
    ]
