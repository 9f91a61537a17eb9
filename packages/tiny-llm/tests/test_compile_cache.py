"""The compile cache on the CPU: a first job compiles cold and saves its artifact, a second job
of the same point loads it and compiles nothing again; a corrupt, a foreign or an unwritable
cache makes a cold job that says why, and nothing fails.

Each job is its own process with its own empty node-local inductor cache, as the watchdog
gives every job, so a warm setup can only come from the saved artifact."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import torch

from throughput_schema import WorkerResult, outcome_kind, read
from throughput_schema.compile_cache import CacheArtifact, CacheKey, artifact_name, sidecar_name
from throughput_schema.layout import compiled_dir
from tiny_llm.compile_cache import OFF, CacheFolders, find, folders_for, store

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
# The tiniest recipe the presets allow: one layer, a small vocabulary, context 128, batch 1.
TINIEST = ["model.vocab_size=256", "model.n_layers=1", "model.d_model=64", "model.n_heads=1", "model.ffn_dim=128"]

JOB = """
import sys
from pathlib import Path
from throughput_schema import Protocol
from throughput_schema.recipe import load_recipe
from tiny_llm.compile_cache import CacheFolders
from tiny_llm.worker import WorkerOptions, run_worker

config, output, write, read, campaign, device, *overrides = sys.argv[1:]
protocol = Protocol(warmup=1, windows=2, window_seconds=0.05, min_updates_per_window=1, calibration_updates=1)
folders = CacheFolders(write=Path(write), read=(Path(read),) if read else (), campaign=Path(campaign))
options = WorkerOptions(protocol=protocol, device=device, energy="off", compile_model=True, compile_cache=folders)
run_worker(load_recipe(config, overrides), Path(output), options)
"""


def run_job(
    tmp_path: Path, name: str, write: Path, campaign: Path, read_only: Path | None = None, device: str = "cpu"
) -> WorkerResult:
    """One job in its own process with fresh node-local compiler caches, as the watchdog runs it."""
    local = tmp_path / f"node-{name}"
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(local / "inductor"), TRITON_CACHE_DIR=str(local / "triton"))
    out = tmp_path / f"{name}.json"
    argv = [
        sys.executable,
        "-c",
        JOB,
        str(TINY),
        str(out),
        str(write),
        str(read_only or ""),
        str(campaign),
        device,
        *TINIEST,
    ]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = read(out, WorkerResult)
    assert outcome_kind(result.outcome) == "ok", result.outcome
    return result


def _comparable(result: WorkerResult) -> dict:
    """A result less what differs from run to run (clocks, timings, the cache's own record)."""
    keep = ("recipe", "parameters", "mode", "backend", "protocol", "setup_updates", "kernels", "optimizer_owned")
    return {k: msgspec.to_builtins(getattr(result, k)) for k in keep}


@pytest.mark.slow  # three compiles of a one-layer model on the CPU
def test_a_second_job_of_the_point_loads_what_the_first_compiled(tmp_path):
    campaign = tmp_path / "campaign"
    folder = compiled_dir(campaign)
    cold = run_job(tmp_path, "cold", folder, campaign)
    c = cold.compile_cache
    assert c is not None and c.state == "cold" and c.key is not None, c
    assert c.artifact == f"compiled/{artifact_name(c.key)}" and "saved compiled/" in c.note, c
    saved = campaign / c.artifact
    assert saved.is_file() and (folder / sidecar_name(saved.name)).is_file()
    sidecar = read(folder / sidecar_name(saved.name), CacheArtifact)
    assert sidecar.key == c.key and sidecar.sha256 == c.sha256 and sidecar.size == saved.stat().st_size
    assert c.key.device == "cpu" and c.key.recipe == cold.recipe and c.key.kernels == cold.kernels

    warm = run_job(tmp_path, "warm", folder, campaign)
    w = warm.compile_cache
    assert w is not None and w.state == "warm", w
    assert (w.artifact, w.sha256, w.key) == (c.artifact, c.sha256, c.key)
    # Warm means inductor's own counter found every graph in the loaded cache and generated
    # none. Its compile phase stays about as long on the CPU: the graphs' C++ kernels are compiled
    # again when their module loads (inductor's C++ code cache is node-local, not in the portable
    # artifacts), where on CUDA the Triton kernels come bundled in the graphs' cache entries.
    assert warm.setup_phases["trace"] > 0 and warm.setup_phases["compile"] > 0
    assert _comparable(warm) == _comparable(cold)

    # Corrupt the artifact: the next job ignores it with a note, compiles cold and saves anew.
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    again = run_job(tmp_path, "corrupt", folder, campaign)
    a = again.compile_cache
    assert a is not None and a.state == "cold", a
    assert f"ignored {c.artifact}: its sha256 is not its sidecar's" in a.note and "saved compiled/" in a.note, a
    assert a.artifact == c.artifact and read(folder / sidecar_name(saved.name), CacheArtifact).sha256 == a.sha256
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == a.sha256


@pytest.mark.slow  # two compiles on the CPU
def test_a_foreign_artifact_and_a_folder_that_cannot_be_written_make_a_cold_job_that_says_why(tmp_path):
    campaign = tmp_path / "campaign"
    first = run_job(tmp_path, "first", compiled_dir(campaign), campaign)
    assert first.compile_cache is not None and first.compile_cache.key is not None
    key = first.compile_cache.key
    # Another point's artifact, under this point's name, in the folder the job may only read.
    other = msgspec.structs.replace(key, recipe=msgspec.structs.replace(key.recipe, name="other"))
    parent = tmp_path / "parent"
    store(parent, other, (campaign / first.compile_cache.artifact).read_bytes())
    for name in (artifact_name(other), sidecar_name(artifact_name(other))):
        (parent / name).rename(parent / name.replace(other.digest(), key.digest()))
    # Its own folder cannot be made: a file stands where its parent folder should be.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder\n")
    job = run_job(tmp_path, "foreign", blocked / "compiled", campaign, read_only=parent)
    f = job.compile_cache
    assert f is not None and f.state == "cold" and f.artifact == "" and f.sha256 == "" and f.key == key, f
    assert f"ignored ../parent/{artifact_name(key)}: its sidecar names another key" in f.note, f
    assert "not saved: cannot write" in f.note and len(f.note.splitlines()) == 1, f
    assert job.throughput is not None and blocked.read_text() == "a file, not a folder\n"
    assert sorted(p.name for p in parent.iterdir()) == sorted([artifact_name(key), sidecar_name(artifact_name(key))])


def test_an_artifact_is_found_only_with_its_own_key_and_digest(tmp_path):
    from throughput_schema.recipe import load_recipe

    key = CacheKey(
        device="cpu", torch="t", triton="", cuda="", sources="s", kernels={"a": "b"}, recipe=load_recipe(TINY, TINIEST)
    )
    own, parent = tmp_path / "own", tmp_path / "parent"
    folders = CacheFolders(write=own, read=(parent,), campaign=tmp_path)
    notes: list[str] = []
    assert find(folders, key, notes) is None and notes == []
    path, digest = store(parent, key, b"compiled bytes")
    found = find(folders, key, notes)
    assert found is not None and found.path == path and found.sha256 == digest and notes == []
    # The own folder's copy is read first; a sidecar that does not decode is passed over with a note.
    store(own, key, b"other bytes")
    (own / sidecar_name(artifact_name(key))).write_text("{not json")
    found = find(folders, key, notes)
    assert found is not None and found.path == path
    assert len(notes) == 1 and notes[0].startswith(
        f"ignored own/{artifact_name(key)}: its sidecar or bytes cannot be read"
    )


def test_the_folders_come_from_the_flag_else_from_the_request():
    request = ("/runs/a/compiled", ["/runs/parent/compiled"], "/runs/a")
    assert folders_for(None, *request) == CacheFolders(
        write=Path("/runs/a/compiled"), read=(Path("/runs/parent/compiled"),), campaign=Path("/runs/a")
    )
    assert folders_for(OFF, *request).off and folders_for(None, "", [], "/runs/spot").off
    mine = folders_for("/scratch/mine", *request)
    assert mine.write == Path("/scratch/mine") and mine.read == () and mine.relative(Path("/runs/x")) == "../x"
    # A person's command line: nothing unless asked.
    assert folders_for(OFF, "", [], "").off and folders_for(OFF, "", [], "").relative(Path("/a/b")) == "/a/b"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_warm_setup_compiles_nothing_and_captures_the_same_graph(tmp_path):
    """On CUDA the Triton kernels come inside the saved graphs: the warm compile phase is a
    fraction of the cold one, and the same update is captured and measured."""
    campaign = tmp_path / "campaign"
    cold = run_job(tmp_path, "cold", compiled_dir(campaign), campaign, device="cuda")
    warm = run_job(tmp_path, "warm", compiled_dir(campaign), campaign, device="cuda")
    assert cold.compile_cache is not None and cold.compile_cache.state == "cold", cold.compile_cache
    assert warm.compile_cache is not None and warm.compile_cache.state == "warm", warm.compile_cache
    assert warm.compile_cache.key is not None and warm.compile_cache.key.device.startswith("sm_")
    assert warm.setup_phases["compile"] < 0.5 * cold.setup_phases["compile"], (cold.setup_phases, warm.setup_phases)
    assert _comparable(warm) == _comparable(cold) and warm.backend == "cuda-graph"
