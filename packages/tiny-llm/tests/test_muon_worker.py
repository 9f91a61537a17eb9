"""Muon through the worker on the CPU: the complete update learns, the result names what each
optimizer owned, and bad input is one line, exit 2 and no result file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from throughput_schema import WorkerResult, outcome_kind, read
from throughput_schema.muon import muon_matrices
from throughput_schema.recipe import load_recipe
from tiny_llm.arena_muon import ArenaMuon
from tiny_llm.cli import main
from tiny_llm.update import build

ROOT = Path(__file__).resolve().parents[3]
TINY_YAML = ROOT / "configs" / "tiny.yaml"
TINY = ["--config", str(TINY_YAML), "--set", "model.vocab_size=512"]
FAST = ["--warmup", "2", "--windows", "5", "--window-seconds", "0.1", "--min-updates-per-window", "2"]
FAST += ["--device", "cpu", "--energy", "off"]


def _losses(optimizer: str, updates: int) -> list[float]:
    # The tiny preset with a 512-token vocabulary, as the other CPU tests run it: the layers
    # Muon owns are the preset's, and 400 updates take minutes, not a quarter of an hour.
    recipe = load_recipe(TINY_YAML, [f"optimizer.name={optimizer}", "model.vocab_size=512"])
    built = build(recipe, torch.device("cpu"))
    losses = []
    for _ in range(updates):
        built.run()
        losses.append(float(built.update.loss))
    assert isinstance(built.optimizer, ArenaMuon) == (optimizer == "muon")
    return losses


@pytest.mark.slow  # 400 CPU updates: minutes on a loaded machine
def test_the_first_200_updates_of_the_synthetic_protocol_lower_the_loss_as_adamws_do():
    adamw, muon = _losses("adamw", 200), _losses("muon", 200)
    assert adamw[0] == pytest.approx(muon[0]), "both start from the same weights and batch"
    tail = lambda xs: sum(xs[-20:]) / 20  # noqa: E731
    # AdamW memorises the one repeated batch (ln 512 = 6.2 at the start); Muon must too, at
    # least as far: the update is Muon's, not a no-op or a divergence.
    assert tail(adamw) < 0.5 * adamw[0]
    assert tail(muon) < 0.5 * muon[0] and tail(muon) <= tail(adamw) * 1.1


def test_the_worker_trains_with_muon_and_records_what_each_optimizer_owned(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--optimizer-name", "muon", "--output", str(out), *FAST]) == 0
    result = read(out, WorkerResult)
    assert outcome_kind(result.outcome) == "ok" and result.recipe.optimizer.name == "muon"
    assert result.protocol.optimizer == "muon"
    owned = result.optimizer_owned
    assert owned["muon"] == [m.label for m in muon_matrices(result.recipe.model)]
    assert owned["muon"][:3] == ["blocks.0.attn.qkv.weight[0:128]", "blocks.0.attn.qkv.weight[128:256]",
                                 "blocks.0.attn.qkv.weight[256:384]"]  # fmt: skip
    assert "embed.weight" in owned["adamw"] and "norm.weight" in owned["adamw"]


def test_an_adamw_result_records_no_split(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST]) == 0
    result = read(out, WorkerResult)
    assert result.recipe.optimizer.name == "adamw" and result.optimizer_owned == {}


# What the one line says, for each bad input. `--optimizer muon` is never read as
# --optimizer-timing or --optimizer-kernel: an abbreviation of them all is ambiguous.
BAD_INPUT = {
    "argument --optimizer-name: invalid choice: 'sgd'": ["--optimizer-name", "sgd"],
    "ambiguous option: --optimizer could match": ["--optimizer", "muon"],
    "use one of adamw, muon": ["--set", "optimizer.name=sgd"],
    "Expected `float` < 1.0 - at `$.optimizer.muon_momentum`": ["--set", "optimizer.muon_momentum=1"],
    "Expected `float` >= 0.0": ["--set", "optimizer.muon_momentum=-0.5"],
    "Expected `int` >= 1 - at `$.optimizer.muon_ns_steps`": ["--set", "optimizer.muon_ns_steps=0"],
    "with Muon use auto or fused": ["--optimizer-name", "muon", "--optimizer-kernel", "triton"],
    # FP8 and Muon are each measured alone before they are offered together.
    "precision fp8-tensorwise with optimizer muon: the pair is not measured yet": [
        "--optimizer-name",
        "muon",
        "--precision",
        "fp8-tensorwise",
    ],
}


@pytest.mark.parametrize(("message", "args"), BAD_INPUT.items())
def test_bad_optimizer_input_is_one_line_exit_2_and_no_result(tmp_path, capsys, args, message):
    out = tmp_path / "result.json"
    assert _status(["benchmark-throughput-worker", *TINY, *args, "--output", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not out.exists()


def _status(argv: list[str]) -> int:
    """main's exit status, whether it returns one or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_the_optimizer_timing_worker_times_muons_step_as_adamws(tmp_path, capsys):
    out = tmp_path / "result.json"
    args = [*TINY, "--optimizer-name", "muon", "--optimizer-timing", "--output", str(out), *FAST]
    assert main(["benchmark-throughput-worker", *args]) == 0
    result = read(out, WorkerResult)
    timing = result.optimizer_timing
    assert result.mode == "optimizer-timing" and timing is not None
    assert timing.optimizer_ms > 0 and 0 < timing.share_of_graph < 1 and 0 < timing.share_of_wall < 1
    assert "optimizer " in capsys.readouterr().out
