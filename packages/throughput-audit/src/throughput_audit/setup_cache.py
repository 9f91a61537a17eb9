"""The compile cache check (`setup.cache`): a warm setup names the artifact it loaded.

A job that loaded what an earlier job compiled spent less GPU time on setup; the audit checks
that its result names an artifact that is there, in its campaign's `compiled/` or (an
optimizer follow-up) its parent's, with the sha256 recorded, beside a sidecar that says the
same, and compiled for this very point: the key's recipe, kernels and versions are the
result's own, and its sources are the campaign's frozen copy. A spot check compiles
everything again, so it has no warm setup at all.
"""

from __future__ import annotations

from pathlib import Path

from throughput_audit.findings import Checks
from throughput_audit.optimizer import parent_path
from throughput_schema import Manifest, SchemaError, WorkerResult, read
from throughput_schema.compile_cache import CacheArtifact, CompileCache, artifact_name, frozen_sources, sidecar_name
from throughput_schema.digests import sha256_file
from throughput_schema.layout import job_folders

# Compiled artifacts are a cache: a copy of a campaign may leave them out (tools/h200/e2e.sh packs
# none), and is audited with this flag, which the check's message names where one is missing.
NO_COMPILED = "--no-compiled"


def check_cache(
    checks: Checks, root: Path, manifest: Manifest, file: str, result: WorkerResult, *, artifacts: bool = True
) -> None:
    cache = result.compile_cache
    if cache is None or cache.state != "warm":
        return  # a cold or unused cache claims nothing
    if not artifacts:
        checks.not_applicable(
            "setup.cache", f"{file}: the warm setup's artifact {cache.artifact} not checked ({NO_COMPILED})", file
        )
        return
    problem = _warm_problem(root, manifest, result, cache)
    checks.expect(
        "setup.cache",
        problem is None,
        file,
        f"{file}: " + (problem or f"the warm setup loaded {cache.artifact}, compiled for this point"),
        artifact=cache.artifact,
        sha256=cache.sha256,
    )


def _folders(root: Path, manifest: Manifest) -> list[Path]:
    """The folders a job of this campaign may load from, its parent found as the audit finds it."""
    parent = parent_path(root, manifest) if manifest.parent is not None else None
    write, read = job_folders(root, manifest, parent)
    return [f.resolve() for f in ([write] if write is not None else []) + read]


def _warm_problem(root: Path, manifest: Manifest, result: WorkerResult, cache: CompileCache) -> str | None:
    key = cache.key
    if key is None:
        return "a warm setup without the key of what it loaded"
    folders = _folders(root, manifest)
    if not folders:
        return "a spot check's job loaded a compiled artifact; it must compile every point again"
    path = (root / cache.artifact).resolve()
    if path.parent not in folders:
        # Campaigns moved apart since: the parent is found by its name (`parent_path`), the
        # artifact by its own in the folders the job could load from.
        moved = [f / path.name for f in folders if (f / path.name).is_file()]
        if not moved:
            return f"the warm setup's artifact {cache.artifact} is in no folder its jobs load from"
        path = moved[0]
    if path.name != artifact_name(key):
        return f"the warm setup's artifact {cache.artifact} is not named by its key ({artifact_name(key)})"
    if not path.is_file():
        return (
            f"the warm setup's artifact {cache.artifact} is missing (a copy that left the compiled "
            f"artifacts out: audit it with {NO_COMPILED})"
        )
    if sha256_file(path) != cache.sha256:
        return f"the warm setup's artifact {cache.artifact} is not the one loaded: its sha256 differs"
    try:
        sidecar = read(path.parent / sidecar_name(path.name), CacheArtifact)
    except SchemaError as exc:
        return f"the warm setup's artifact has no readable sidecar: {exc}"
    if sidecar.key != key or sidecar.sha256 != cache.sha256:
        return f"the sidecar of {cache.artifact} names another key or digest than the result"
    return _key_problem(manifest, result, cache)


def _key_problem(manifest: Manifest, result: WorkerResult, cache: CompileCache) -> str | None:
    """Where the loaded artifact's key is not this result's point, its build or its sources."""
    key, hw = cache.key, result.hardware
    assert key is not None
    if key.recipe != result.recipe:
        return "the loaded artifact was compiled for another recipe than the result's point"
    if key.kernels != result.kernels:
        return f"the loaded artifact was compiled with kernels {key.kernels}, the result ran {result.kernels}"
    if (key.torch, key.triton, key.cuda) != (hw.torch, hw.triton, hw.cuda):
        return (
            f"the loaded artifact was compiled by torch {key.torch}, triton {key.triton}, CUDA {key.cuda}; "
            f"the result ran torch {hw.torch}, triton {hw.triton}, CUDA {hw.cuda}"
        )
    if key.sources != frozen_sources(manifest.frozen_files):
        return "the loaded artifact was compiled from other sources than the campaign's frozen copy"
    return None
