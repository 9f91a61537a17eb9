"""Faults in what a campaign keeps of its compiles (`throughput_schema.compile_cache`), for the
audit's planted-fault table (packages/throughput-audit/tests/test_planted_faults.py)."""

from __future__ import annotations

from campaign_builder.planting import Planted, replace_fields
from throughput_schema import Manifest, WorkerResult, read, write_atomic
from throughput_schema.compile_cache import (
    CacheArtifact,
    CacheKey,
    CompileCache,
    artifact_name,
    frozen_sources,
    sidecar_name,
)
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import COMPILED, MANIFEST, RESULT, compiled_dir


def saved_artifact(p: Planted, curve: str, batch: int) -> CompileCache:
    """A point's artifact saved in the campaign's `compiled/` as a worker saves it, with the
    record of a warm setup that loaded it."""
    result = read(p.folder(curve, batch) / RESULT, WorkerResult)
    hw = result.hardware
    key = CacheKey(
        device="sm_90",
        torch=hw.torch,
        triton=hw.triton,
        cuda=hw.cuda,
        sources=frozen_sources(read(p.built.root / MANIFEST, Manifest).frozen_files),
        kernels=result.kernels,
        recipe=result.recipe,
    )
    data = f"compiled update for {key.digest()}\n".encode()
    folder = compiled_dir(p.built.root)
    folder.mkdir(exist_ok=True)
    write_atomic(folder / artifact_name(key), data)
    digest = sha256_bytes(data)
    write_atomic(folder / sidecar_name(artifact_name(key)), CacheArtifact(key=key, sha256=digest, size=len(data)))
    return CompileCache(state="warm", artifact=f"{COMPILED}/{artifact_name(key)}", sha256=digest, key=key)


def warm_setup_of_another_point(p: Planted) -> None:
    """Batch 2 claims the artifact batch 1 loaded, intact and where it should be, but compiled
    for batch 1 (batch 1's own warm record is true and passes)."""
    loaded = saved_artifact(p, "20m-c512", 1)
    p.rewrite_result("20m-c512", 1, replace_fields(compile_cache=loaded))
    p.rewrite_result("20m-c512", 2, replace_fields(compile_cache=loaded))
