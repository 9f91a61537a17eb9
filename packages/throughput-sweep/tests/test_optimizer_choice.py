"""`run --optimizer-name`: a campaign that trains with Muon says so wherever its protocol's
difference from the guide is said, and bad input writes nothing."""

from __future__ import annotations

import functools
import json

import pytest

from campaign_helpers import scripted_run, sweep, write_plan
from throughput_schema import WorkerRequest, read

run = functools.partial(sweep, rc=0)
MUON_LINE = (
    "optimizer differs from the guide: muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps "
    "(3.4445, -4.775, 2.0315), lr adjusted match_rms_adamw; q, k, v, gate and up as separate matrices; "
    "AdamW on the embedding, norms and biases; guide: AdamW)"
)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--optimizer-name", "sgd"], "argument --optimizer-name: invalid choice: 'sgd'"),
        # An abbreviation no longer reads as --optimizer-timing-from.
        (["--optimizer", "muon"], "ambiguous option: --optimizer could match"),
        (
            ["--optimizer-name", "muon", "--precision", "fp8-rowwise"],
            "precision fp8-rowwise with optimizer muon: the pair is not measured yet; use FP8 with AdamW, or Muon at bf16",
        ),
    ],
)
def test_a_bad_optimizer_name_is_one_line_exit_2_nothing_written(tmp_path, args, words):
    out = tmp_path / "c"
    r = run("run", "--output", out, "--models", "20m", *args, rc=2)
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_spot_check_refuses_another_optimizer_than_its_campaigns(tmp_path):
    out = tmp_path / "c"
    r = run(
        "run", "--output", out, "--spot-check-from", tmp_path / "a", "--points", "2", "--optimizer-name", "muon", rc=2
    )
    assert "with A's protocol; drop" in r.stderr and "--optimizer-name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_dry_run_names_the_optimizer_and_writes_nothing(tmp_path):
    out = tmp_path / "dry"
    r = run("run", "--output", out, "--models", "20m", "--contexts", "512", "--optimizer-name", "muon", "--dry-run")
    assert MUON_LINE in r.stdout.splitlines() and not out.exists()


@pytest.mark.slow  # a whole campaign on the local scheduler
def test_a_muon_campaign_is_flagged_in_status_and_collect_and_every_point_trains_with_muon(tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05)
    out = tmp_path / "camp"
    run(*scripted_run(out, 512, poll_max=1), "--optimizer-name", "muon", plan=plan)
    assert MUON_LINE in run("status", "--output", out).stdout.splitlines()
    run("collect", "--output", out)
    assert f"**Note**: {MUON_LINE}.\n" in (out / "README.md").read_text()
    requests = sorted(out.glob("curves/*/b*/attempt-*/request.json"))
    assert len(requests) == 3
    for path in requests:
        request = read(path, WorkerRequest)
        assert request.recipe.optimizer.name == "muon" and request.protocol.optimizer == "muon"
    # A resumed campaign keeps the optimizer it froze.
    r = run("run", "--output", out, "--resume", "--optimizer-name", "adamw", rc=2)
    assert "the protocol is frozen in the manifest" in r.stderr


@pytest.mark.slow  # two campaigns on the local scheduler
def test_an_optimizer_follow_up_of_an_adamw_campaign_times_muon(tmp_path):
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05)
    parent, opt = tmp_path / "parent", tmp_path / "opt"
    run(*scripted_run(parent, 512, poll_max=1), plan=plan)
    run(*scripted_run(opt, timing_from=parent, poll_max=1), "--optimizer-name", "muon", plan=plan)
    assert MUON_LINE in run("status", "--output", opt).stdout.splitlines()
    assert MUON_LINE not in run("status", "--output", parent).stdout
    requests = sorted(opt.glob("curves/*/b*/attempt-*/request.json"))
    assert requests and all(read(p, WorkerRequest).recipe.optimizer.name == "muon" for p in requests)
    run("collect", "--output", opt)
    rows = json.loads((opt / "optimizer.json").read_text())["points"]
    assert rows and {r["optimizer"] for r in rows} == {"muon"}
    assert "The optimizer step timed: muon (the guide's is adamw)." in (opt / "README.md").read_text()
