"""One attempt: its request, its batch script (golden text, shell-injection safety, a real run
through bash), and the order in which its files are written before the submission."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from throughput_schema import (
    ModelConfig,
    PointSpec,
    Protocol,
    Recipe,
    SubmissionIntent,
    TrainingConfig,
    WorkerRequest,
    WorkerResult,
    read,
    write_atomic,
)
from throughput_schema.recipe import load_recipe, override_args
from throughput_sweep.attempt import attempt_request, job_script, submit_attempt
from throughput_sweep.curves import pick
from throughput_sweep.freezing import create
from throughput_sweep.planning import plan_throughput
from throughput_sweep.profiles import embedded_local_profile

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden" / "job.sh"
RECIPE = Recipe(
    name="tiny",
    model=ModelConfig(n_layers=2, d_model=64, n_heads=1, ffn_dim=128, context_length=128),
    training=TrainingConfig(micro_batch_size=1, batch_tokens=128),
)
EVIL = [
    "has space",
    'it\'s "quoted"',
    "$(touch PWNED1)",
    "`touch PWNED2`",
    "line\ntouch PWNED3",
    "semi; touch PWNED4 #",
    "${HOME}$PATH",
    "* ? [a]",
    "-n",
]


def request_for(campaign: Path, **fields) -> WorkerRequest:
    attempt = campaign / "curves/tiny-c128/b1/attempt-1"
    values = dict(
        point=PointSpec(model="tiny", context_length=128, batch_size=1),
        recipe=RECIPE,
        protocol=Protocol(),
        campaign=str(campaign),
        python="/opt/venv/bin/python",
        result=str(attempt / "result.json"),
    )
    return WorkerRequest(**{**values, **fields})


def golden_script() -> str:
    campaign = Path("/runs/gh200-throughput")
    attempt = campaign / "curves/250m-c2048/b8/attempt-1"
    request = request_for(
        campaign,
        point=PointSpec(model="250m", context_length=2048, batch_size=8),
        pythonpath=[
            str(campaign / "frozen/packages" / p / "src") for p in ("throughput-schema", "throughput-sweep", "tiny-llm")
        ],
        result=str(attempt / "result.json"),
    )
    return job_script(request, profile="gh200")


def test_golden_script():
    text = golden_script()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_script_has_no_sbatch_directives_and_strict_mode():
    text = golden_script()
    assert text.startswith("#!/bin/bash\n")
    assert "#SBATCH" not in text
    assert "set -euo pipefail" in text
    assert text.rstrip().splitlines()[-1] == (
        "exec /opt/venv/bin/python -m throughput_sweep.node.watchdog "
        "--request /runs/gh200-throughput/curves/250m-c2048/b8/attempt-1/request.json"
    )


def test_bash_syntax_is_valid():
    subprocess.run(["bash", "-n"], input=golden_script(), text=True, check=True)


def _stub_python(folder: Path) -> Path:
    """A 'python' that records its argv, cwd and PYTHONPATH instead of running anything."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "python"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'pythonpath': os.environ['PYTHONPATH']},\n"
        "          open(os.environ['STUB_OUT'], 'w'))\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return stub


@pytest.mark.parametrize("evil", EVIL)
def test_hostile_values_stay_data(tmp_path, evil):
    campaign = tmp_path / f"camp {evil}"[:60].replace("/", "_")
    campaign.mkdir()
    stub = _stub_python(tmp_path / f"bin {evil}".replace("/", "_"))
    request = request_for(
        campaign,
        point=PointSpec(model=evil, context_length=128, batch_size=1),
        python=str(stub),
        pythonpath=[str(campaign / f"src {evil}")],
        worker=evil,
    )
    script = tmp_path / "job.sh"
    script.write_text(job_script(request, profile=evil))
    out = tmp_path / "stub.json"
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        ["bash", str(script)],
        cwd=work,
        env={**os.environ, "STUB_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    # Nothing executed: no file appeared anywhere we could have been tricked into.
    for root in (tmp_path, work, campaign, Path.cwd()):
        assert not list(root.glob("PWNED*")), list(root.glob("PWNED*"))
    seen = json.loads(out.read_text())
    request_path = str(campaign / "curves/tiny-c128/b1/attempt-1/request.json")
    assert seen["argv"] == ["-m", "throughput_sweep.node.watchdog", "--request", request_path]
    assert seen["cwd"] == str(campaign)
    assert seen["pythonpath"] == str(campaign / f"src {evil}")


def test_refuses_what_cannot_be_expressed(tmp_path):
    with pytest.raises(ValueError, match="':'"):
        job_script(request_for(tmp_path, pythonpath=["a:b"]), profile="p")
    with pytest.raises(ValueError, match="NUL"):
        job_script(request_for(tmp_path / "r\x00"), profile="p")


def test_script_runs_the_real_watchdog_from_a_frozen_like_tree(tmp_path):
    """bash job.sh -> watchdog (from the PYTHONPATH given) -> worker --request; the worker's result is kept."""
    import throughput_schema
    import throughput_sweep

    campaign = tmp_path / "camp 'x' $(touch PWNED)"
    extra = campaign / "frozen" / "extra"
    extra.mkdir(parents=True)
    (extra / "echo_worker.py").write_text(
        "import sys\n"
        "from throughput_schema import WorkerRequest, WorkerResult, read, write_atomic\n"
        "from throughput_schema.outcomes import Ok\n"
        "request = read(sys.argv[sys.argv.index('--request') + 1], WorkerRequest)\n"
        "output = sys.argv[sys.argv.index('--output') + 1]\n"
        "from throughput_schema.records import WorkerIdentity\n"
        "worker = WorkerIdentity(module='echo_worker')\n"
        "write_atomic(output, WorkerResult(outcome=Ok(), recipe=request.recipe, parameters=1, backend='script-test', "
        "worker=worker))\n"
    )
    srcs = [Path(throughput_schema.__file__).parents[1], Path(throughput_sweep.__file__).parents[1], extra]
    request = request_for(
        campaign, python=sys.executable, pythonpath=[str(s) for s in srcs], worker="echo_worker", time_limit_seconds=60
    )
    attempt = Path(request.result).parent
    attempt.mkdir(parents=True)
    write_atomic(attempt / "request.json", request)
    script = attempt / "job.sh"
    script.write_text(job_script(request, profile="local"))
    proc = subprocess.run(["bash", str(script)], cwd=attempt, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = read(request.result, WorkerResult)
    assert result.backend == "script-test" and result.recipe == RECIPE
    assert not list(tmp_path.rglob("PWNED"))


# ------------------------------------------------------------------- the campaign's attempts


class RecordingScheduler:
    """Accepts every job and notes which of the attempt's files existed when it was asked."""

    name = "local"
    slots = 12

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    async def submit(self, script: Path, *, token: str, workdir: Path) -> str:
        self.seen.append(sorted(p.name for p in Path(workdir).iterdir()))
        return str(len(self.seen))

    async def poll(self, job_ids):
        return {}

    async def find_by_token(self, tokens, since: datetime):
        return {t: [] for t in tokens}

    async def cancel(self, job_id: str) -> None:
        pass

    async def launch_failure(self, job_id: str) -> str:
        return ""


def _campaign(tmp_path: Path, **kw):
    plan = plan_throughput(
        tmp_path / "c",
        models=["tiny"],
        contexts=[128],
        protocol=Protocol(window_seconds=1.0),
        profile=embedded_local_profile(),
        max_batch=4,
        worker="tiny_llm",
        root=ROOT,
        **kw,
    )
    return create(plan)


def test_request_script_and_intent_are_written_before_the_submission(tmp_path):
    campaign = _campaign(tmp_path)
    [point] = pick(campaign.curves(), 12)
    scheduler = RecordingScheduler()
    outcome = anyio.run(submit_attempt, campaign, scheduler, point)
    assert outcome.job_id == "1"
    assert scheduler.seen == [["intent.json", "job.sh", "request.json"]]
    folder = campaign.root / "curves/tiny-c128/b1/attempt-1"
    request = read(folder / "request.json", WorkerRequest)
    assert request == attempt_request(campaign, point)
    intent = read(folder / "intent.json", SubmissionIntent)
    assert intent.point == request.point
    script = (folder / "job.sh").read_bytes()
    assert intent.script_sha256 == hashlib.sha256(script).hexdigest()
    assert script.decode() == job_script(request, profile=campaign.manifest.profile.name)
    assert (folder / "receipt.json").exists()


def test_request_is_resolved_once_with_absolute_paths(tmp_path):
    campaign = _campaign(tmp_path)
    [point] = pick(campaign.curves(), 12)
    request = attempt_request(campaign, point)
    # Its jobs load and save compiled updates in the campaign's own folder, and read no other.
    assert (request.compile_cache, request.compile_cache_read) == (str(campaign.root / "compiled"), [])
    assert request.recipe.training.micro_batch_size == 1 and request.recipe.model.context_length == 128
    assert request.protocol == campaign.manifest.protocol and request.mode == "throughput"
    assert request.deadline_seconds == campaign.manifest.profile.watchdog_minutes * 60
    assert request.time_limit_seconds == campaign.manifest.profile.time_limit_minutes * 60
    assert request.baseline == ""
    for path in (request.campaign, request.result, *request.pythonpath):
        assert Path(path).is_absolute() and Path(path).is_relative_to(campaign.root)
    assert {Path(p).parent.name for p in request.pythonpath} >= {"throughput-schema", "throughput-sweep", "tiny-llm"}


def test_the_recipe_is_the_one_the_guides_command_line_gives(tmp_path):
    """The worker measures the request's recipe; a person's `--config PRESET --set ...` for every
    key of it yields the very same recipe."""
    campaign = _campaign(tmp_path)
    [point] = pick(campaign.curves(), 12)
    recipe = attempt_request(campaign, point).recipe
    assert load_recipe(campaign.preset_path("tiny"), override_args(recipe)) == recipe
    assert (
        recipe.optimizer.lr == campaign.manifest.protocol.lr and recipe.training.seed == campaign.manifest.protocol.seed
    )


def test_optimizer_requests_name_the_baseline(tmp_path):
    import msgspec

    from throughput_sweep.campaign import Campaign

    made = _campaign(tmp_path)
    campaign = Campaign(root=made.root, manifest=msgspec.structs.replace(made.manifest, kind="optimizer-timing"))
    [point] = pick(made.curves(), 12)
    request = attempt_request(campaign, point)
    folder = campaign.root / "curves/tiny-c128/b1/attempt-1"
    assert request.mode == "optimizer-timing"
    assert (request.baseline, request.result) == (str(folder / "baseline.json"), str(folder / "result.json"))


def test_a_result_for_a_job_that_wrote_none_names_the_requests_recipe(tmp_path):
    from throughput_slurm.sacct import AccountingRow
    from throughput_sweep.schedulers.slurm.text import job_status
    from throughput_sweep.submission import write_missing_result

    campaign = _campaign(tmp_path)
    [point] = pick(campaign.curves(), 12)
    anyio.run(submit_attempt, campaign, RecordingScheduler(), point)
    folder = campaign.root / "curves/tiny-c128/b1/attempt-1"
    request = read(folder / "request.json", WorkerRequest)
    [info] = campaign.infos()
    row = AccountingRow(job_id="1", job_name="x", state="TIMEOUT", exit_code="0:15")
    path = write_missing_result(campaign, info, job_status("1", "TIMEOUT", row=row))
    result = read(path, WorkerResult)
    assert result.outcome.__struct_config__.tag == "timeout"
    assert result.recipe == request.recipe and result.protocol == request.protocol
