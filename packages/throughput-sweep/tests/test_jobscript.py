"""The batch script: golden text, shell-injection safety, and a real run through bash."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from throughput_schema import ClusterProfile, ModelConfig, PointSpec, Recipe, TrainingConfig, WorkerResult, read, write_atomic
from throughput_sweep.jobscript import WorkerStep, render_job_script, watchdog_argv

GOLDEN = Path(__file__).parent / "golden" / "job.sh"
PROFILE = ClusterProfile(name="gh200", scheduler="slurm", account="throughput", partition="gpu")
RECIPE = Recipe(
    name="tiny",
    model=ModelConfig(n_layers=2, d_model=64, n_heads=1, ffn_dim=128, context_length=128),
    training=TrainingConfig(micro_batch_size=1, batch_tokens=128),
)
EVIL = [
    "has space",
    "it's \"quoted\"",
    "$(touch PWNED1)",
    "`touch PWNED2`",
    "line\ntouch PWNED3",
    "semi; touch PWNED4 #",
    "${HOME}$PATH",
    "* ? [a]",
    "-n",
]


def golden_script() -> str:
    campaign = Path("/runs/gh200-throughput")
    attempt = campaign / "curves/250m-c2048/b8/attempt-1"
    point = PointSpec(model="250m", context_length=2048, batch_size=8)
    worker = [
        "/opt/venv/bin/python", "-m", "tiny_llm", "benchmark-throughput-worker",
        "--config", str(campaign / "frozen/configs/250m.yaml"),
        "--set", "model.context_length=2048", "--set", "training.micro_batch_size=8",
        "--output", str(attempt / "result.json"),
    ]
    return render_job_script(
        PROFILE,
        campaign=campaign,
        recipe="frozen/recipes/250m.json",
        steps=[WorkerStep(worker, attempt / "result.json")],
        pythonpath=["frozen/packages/throughput-schema/src", "frozen/packages/throughput-sweep/src",
                    "frozen/packages/tiny-llm/src"],
        python="/opt/venv/bin/python",
        point=point,
    )


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
    assert text.rstrip().splitlines()[-1].startswith("exec /opt/venv/bin/python -m throughput_sweep.node.watchdog ")


def test_bash_syntax_is_valid():
    subprocess.run(["bash", "-n"], input=golden_script(), text=True, check=True)


def _stub_python(folder: Path) -> Path:
    """A 'python' that records its argv, cwd and PYTHONPATH instead of running anything."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "python"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'pythonpath': os.environ['PYTHONPATH'],\n"
        "           'extra': os.environ.get('EXTRA_VALUE')}, open(os.environ['STUB_OUT'], 'w'))\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return stub


@pytest.mark.parametrize("evil", EVIL)
def test_hostile_values_stay_data(tmp_path, evil):
    campaign = tmp_path / f"camp {evil}"[:60].replace("/", "_")
    campaign.mkdir()
    stub = _stub_python(tmp_path / f"bin {evil}".replace("/", "_"))
    profile = ClusterProfile(name=evil, scheduler="slurm", account=evil, partition=evil, mem=evil,
                             extra_sbatch_args=[evil])
    point = PointSpec(model=evil, context_length=128, batch_size=1)
    steps = [WorkerStep([str(stub), evil, "--flag", evil], campaign / f"result {evil}.json", label=evil)]
    text = render_job_script(profile, campaign=campaign, recipe=f"recipe {evil}.json", steps=steps,
                             pythonpath=[f"src {evil}"], python=stub, point=point, env={"EXTRA_VALUE": evil})
    script = tmp_path / "job.sh"
    script.write_text(text)
    out = tmp_path / "stub.json"
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(["bash", str(script)], cwd=work, env={**os.environ, "STUB_OUT": str(out)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    # Nothing executed: no file appeared anywhere we could have been tricked into.
    for root in (tmp_path, work, campaign, Path.cwd()):
        assert not list(root.glob("PWNED*")), list(root.glob("PWNED*"))
    seen = json.loads(out.read_text())
    expected = watchdog_argv(profile, python=str(stub), recipe=str(campaign / f"recipe {evil}.json"), steps=steps,
                             context_length=128, batch_size=1)
    assert seen["argv"] == expected[1:]
    assert seen["cwd"] == str(campaign)
    assert seen["pythonpath"] == str(campaign / f"src {evil}")
    assert seen["extra"] == evil
    worker = json.loads(seen["argv"][seen["argv"].index("--worker") + 1])
    assert worker["argv"][1] == evil and worker["argv"][3] == evil


def test_refuses_what_cannot_be_expressed(tmp_path):
    steps = [WorkerStep(["true"], tmp_path / "r.json")]
    with pytest.raises(ValueError, match="':'"):
        render_job_script(PROFILE, campaign=tmp_path, recipe="r.json", steps=steps, pythonpath=["a:b"])
    with pytest.raises(ValueError, match="NUL"):
        render_job_script(PROFILE, campaign=tmp_path, recipe="r\x00.json", steps=steps, pythonpath=[])
    with pytest.raises(ValueError, match="environment variable"):
        render_job_script(PROFILE, campaign=tmp_path, recipe="r.json", steps=steps, pythonpath=[],
                          env={"A; touch x": "1"})


def test_script_runs_the_real_watchdog_from_a_frozen_like_tree(tmp_path):
    """bash job.sh -> watchdog (from the PYTHONPATH given) -> worker; the worker's result is kept."""
    import throughput_schema
    import throughput_sweep

    campaign = tmp_path / "camp 'x' $(touch PWNED)"
    attempt = campaign / "curves/tiny-c128/b1/attempt-1"
    attempt.mkdir(parents=True)
    recipe = write_atomic(campaign / "recipe.json", RECIPE)
    result = attempt / "result.json"
    worker = (
        "import sys\n"
        "from throughput_schema import WorkerResult, Recipe, read, write_atomic\n"
        "from throughput_schema.outcomes import Ok\n"
        "r = read(sys.argv[1], Recipe)\n"
        "write_atomic(sys.argv[2], WorkerResult(outcome=Ok(), recipe=r, parameters=1, backend='script-test'))\n"
    )
    srcs = [Path(throughput_schema.__file__).parents[1], Path(throughput_sweep.__file__).parents[1]]
    text = render_job_script(PROFILE, campaign=campaign, recipe=recipe, python=sys.executable, pythonpath=srcs,
                             steps=[WorkerStep([sys.executable, "-c", worker, str(recipe), str(result)], result)],
                             point=PointSpec(model="tiny", context_length=128, batch_size=1))
    script = attempt / "job.sh"
    script.write_text(text)
    proc = subprocess.run(["bash", str(script)], cwd=attempt, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert read(result, WorkerResult).backend == "script-test"
    assert not list(tmp_path.rglob("PWNED"))
