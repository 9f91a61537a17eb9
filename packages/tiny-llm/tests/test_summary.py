"""Derived figures from constructed samples, checked against numbers worked out by hand."""

import json
from pathlib import Path

import pytest

from throughput_schema import BurstSample, Hardware, Protocol, Window
from throughput_schema.layout import bursts_path, decode_bursts
from throughput_schema.recipe import load_recipe
from tiny_llm.protocol import Measurement
from tiny_llm.summary import optimizer_summary, throughput_summary, write_bursts


def b(window, updates, wall, graph, opt):
    return BurstSample(window=window, updates=updates, wall_seconds=wall, graph_ms=graph, optimizer_ms=opt)


def measured() -> Measurement:
    """Three windows of 4 updates, 1000 tokens per update.

    window 0: bursts of 3 (opt 2.0, graph 10.0) and 1 (opt 4.0, graph 12.0), 0.03 + 0.01 s
              -> optimizer (3·2 + 1·4)/4 = 2.5 ms, graph (3·10 + 12)/4 = 10.5 ms, wall 10 ms/update
    window 1: bursts of 2 (opt 3.0) and 2 (opt 1.0), graph 11.0, 0.024 + 0.024 s
              -> optimizer 2.0 ms, graph 11.0 ms, wall 12 ms/update
    window 2: one burst of 4 (opt 3.0, graph 9.0), 0.044 s -> 3.0 ms, 9.0 ms, wall 11 ms/update
    An unweighted mean of window 0's samples would give 3.0 ms, not 2.5.
    """
    m = Measurement(tokens_per_update=1000)
    m.bursts = [
        b(0, 3, 0.03, 10.0, 2.0),
        b(0, 1, 0.01, 12.0, 4.0),
        b(1, 2, 0.024, 11.0, 3.0),
        b(1, 2, 0.024, 11.0, 1.0),
        b(2, 4, 0.044, 9.0, 3.0),
    ]
    m.windows = [
        Window(updates=4, seconds=0.04, counter_after=14),
        Window(updates=4, seconds=0.048, counter_after=18),
        Window(updates=4, seconds=0.044, counter_after=22),
    ]
    return m


def test_burst_weighting_medians_cv_and_shares_by_hand():
    t = optimizer_summary(measured(), Protocol(), separate_step_ms=2.4)
    assert t.window_optimizer_ms == pytest.approx([2.5, 2.0, 3.0])
    assert t.window_graph_ms == pytest.approx([10.5, 11.0, 9.0])
    assert t.optimizer_ms == pytest.approx(2.5)
    # mean 2.5, deviations 0, -0.5, 0.5: stdev (n-1) = sqrt(0.5 / 2) = 0.5 -> CV 0.2 > 5%
    assert t.optimizer_cv == pytest.approx(0.2) and t.unstable
    # median wall ms per update of 10, 12, 11 is 11; median graph ms of 10.5, 11, 9 is 10.5
    assert t.share_of_wall == pytest.approx(2.5 / 11)
    assert t.share_of_graph == pytest.approx(2.5 / 10.5)
    assert t.separate_step_ms == 2.4 and len(t.bursts) == 5


def test_throughput_summary_by_hand():
    root = Path(__file__).resolve().parents[3]
    recipe = load_recipe(
        root / "configs" / "20m.yaml",
        ["model.context_length=512", "training.micro_batch_size=2", "training.batch_tokens=1024"],
    )
    m = measured()
    m.tokens_per_update = 1024
    # rates: 4·1024/0.04 = 102400, 4·1024/0.048 = 85333.3, 4·1024/0.044 = 93090.9 -> median 93090.9
    h200 = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=int(140.4 * 2**30))
    t = throughput_summary(m, recipe, Protocol(), h200)
    assert t.window_tokens_per_second == pytest.approx([102400.0, 4096 / 0.048, 4096 / 0.044])
    assert t.tokens_per_second == pytest.approx(4096 / 0.044)
    assert t.sequences_per_second == pytest.approx(4096 / 0.044 / 512)
    assert t.update_ms == pytest.approx(44.0 / 4)  # 1000 · 1024 / (4096 / 0.044)
    assert t.peak_flops == 989e12 and t.mfu == pytest.approx(t.flops_per_token * t.tokens_per_second / 989e12)
    assert t.unstable  # CV of the three rates is about 9%
    assert throughput_summary(m, recipe, Protocol(), Hardware()).mfu is None


def test_bursts_file_beside_the_result(tmp_path):
    assert bursts_path(tmp_path / "p" / "result.json") == tmp_path / "p" / "bursts.jsonl"
    assert bursts_path(tmp_path / "timing.json") == tmp_path / "timing.bursts.jsonl"
    t = optimizer_summary(measured(), Protocol())
    path = write_bursts(tmp_path / "p" / "result.json", t)
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[1]) == {
        "window": 0,
        "updates": 1,
        "wall_seconds": 0.01,
        "graph_ms": 12.0,
        "optimizer_ms": 4.0,
    }
    assert decode_bursts(path.read_bytes()) == t.bursts
