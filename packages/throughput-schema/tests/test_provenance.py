"""The lines every tool prints about what a campaign's figures rest on, from one place."""

from __future__ import annotations

import pytest

from throughput_schema import Hardware, Protocol
from throughput_schema.provenance import (
    WorkerRefused,
    allowed_worker_banner,
    hardware_mix,
    is_test_worker,
    protocol_deviation,
    worker_banner,
)


def test_the_guides_protocol_says_nothing_and_any_other_names_what_differs():
    assert protocol_deviation(Protocol()) is None
    assert (
        protocol_deviation(Protocol(window_seconds=2.0)) == "protocol differs from the guide: 2 s windows (guide: 10 s)"
    )
    line = protocol_deviation(Protocol(warmup=0, calibration_updates=3, windows=7, window_seconds=9.5))
    assert line == (
        "protocol differs from the guide: 0 warm-up updates (guide: 20), 3 calibration updates (guide: 5), "
        "7 windows (guide: 5), 9.5 s windows (guide: 10 s)"
    )


def test_hardware_mix_names_each_difference_and_ignores_blanks_and_failures():
    h200 = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=150_754_820_096, driver="570.1", torch="2.10.0")
    assert hardware_mix([h200, None, Hardware(gpu_name="NVIDIA H200"), h200]) is None
    other = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=150_754_820_096, driver="580.2", torch="2.11.0")
    assert hardware_mix([h200, other]) == (
        "points ran on different hardware or software: drivers 570.1 / 580.2; torch versions 2.10.0 / 2.11.0"
    )


def test_only_tiny_llm_is_the_production_worker():
    assert not is_test_worker("tiny_llm") and is_test_worker("scripted_worker")
    assert allowed_worker_banner("scripted_worker").startswith("TEST WORKER scripted_worker: not measured by tiny_llm")


def test_a_test_worker_is_refused_naming_its_campaign_unless_allowed_then_bannered_once():
    pairs = [("A runs/a", "tiny_llm"), ("B runs/b", "scripted_worker"), ("C runs/c", "scripted_worker")]
    assert worker_banner(pairs[:1], allow_test_worker=False) == ""
    with pytest.raises(
        WorkerRefused, match=r"^B runs/b: campaign run with test worker 'scripted_worker'.*--allow-test-worker"
    ):
        worker_banner(pairs, allow_test_worker=False)
    assert worker_banner(pairs, allow_test_worker=True) == allowed_worker_banner("scripted_worker")


def test_an_optimizer_other_than_the_guides_is_a_line_of_its_own_beside_the_protocols():
    from throughput_schema.muon import optimizer_deviation
    from throughput_schema.provenance import guide_deviations, notes

    assert optimizer_deviation(Protocol()) is None and guide_deviations(Protocol()) == []
    muon = Protocol(optimizer="muon", muon_nesterov=False, muon_ns_steps=3)
    line = optimizer_deviation(muon)
    assert line == (
        "optimizer differs from the guide: muon (momentum 0.95, 3 Newton-Schulz steps (3.4445, -4.775, 2.0315), "
        "lr adjusted match_rms_adamw; q, k, v, gate and up as separate matrices; AdamW on the embedding, norms "
        "and biases; guide: AdamW)"
    )
    both = Protocol(optimizer="muon", muon_nesterov=False, muon_ns_steps=3, window_seconds=2.0)
    assert notes([("a", both), ("b", both)], []) == [protocol_deviation(both), line]
    assert notes([("a", Protocol()), ("b", muon)], []) == [f"b: {line}"]
