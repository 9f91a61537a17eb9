"""The audit's optimizer checks on a real Muon result: the worker's record of which parameters
each optimizer owned passes, and each way of misreporting it fails with its own line."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from throughput_audit.findings import Checks
from throughput_audit.optimizer_split import check_optimizer
from throughput_schema import WorkerResult, read
from tiny_llm.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--set", "model.vocab_size=512"]
FAST = ["--warmup", "2", "--windows", "5", "--window-seconds", "0.1", "--min-updates-per-window", "2"]
FAST += ["--device", "cpu", "--energy", "off"]


@pytest.fixture(scope="module")
def muon_result(tmp_path_factory) -> WorkerResult:
    out = tmp_path_factory.mktemp("muon") / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--optimizer-name", "muon", "--output", str(out), *FAST]) == 0
    return read(out, WorkerResult)


def _verdict(result: WorkerResult) -> dict[str, tuple[bool, str]]:
    checks = Checks()
    check_optimizer(checks, "result.json", result, result.protocol)
    return {c.name: (c.status == "pass", c.message) for c in checks.items}


def _owned(result: WorkerResult, change) -> WorkerResult:
    owned = {k: list(v) for k, v in result.optimizer_owned.items()}
    change(owned)
    return msgspec.structs.replace(result, optimizer_owned=owned)


def test_a_muon_results_own_record_passes(muon_result):
    verdict = _verdict(muon_result)
    assert verdict["optimizer.request"][0] and verdict["optimizer.owned"][0], verdict


def test_a_matrix_left_out_of_muons_list_fails(muon_result):
    ok, message = _verdict(_owned(muon_result, lambda o: o["muon"].pop()))["optimizer.owned"]
    assert not ok and "muon owned" in message and "1 missing" in message


def test_a_fused_weight_taken_whole_fails(muon_result):
    def whole(owned):
        qkv = [x for x in owned["muon"] if x.startswith("blocks.0.attn.qkv.weight[")]
        owned["muon"] = [x for x in owned["muon"] if x not in qkv] + ["blocks.0.attn.qkv.weight[0:384]"]

    ok, message = _verdict(_owned(muon_result, whole))["optimizer.owned"]
    assert not ok and "not in the recipe's split" in message


def test_an_adamw_campaign_asked_for_but_muon_ran_fails_the_request(muon_result):
    result = msgspec.structs.replace(
        muon_result, protocol=msgspec.structs.replace(muon_result.protocol, optimizer="adamw")
    )
    ok, message = _verdict(result)["optimizer.request"]
    assert not ok and "trained with muon, the campaign asked for adamw" in message
