"""What a campaign keeps of its jobs' compiles: each artifact's key, its files, and what a
result records of them.

A job compiles its update with PyTorch's portable cache recording
(`torch.compiler.save_cache_artifacts`); a later job of the same point (a retry, the
optimizer follow-up campaign's) loads it instead of compiling again. The artifact is
named by its key's digest, and a sidecar JSON beside it holds the key and the artifact's
sha256, so a file that is corrupt, cut short or renamed from another key is never trusted:

    <campaign>/compiled/<key digest>.bin    the bytes save_cache_artifacts returned
    <campaign>/compiled/<key digest>.json   `CacheArtifact`: the key, sha256, size

The key names everything the compiled code depends on: the GPU's compute capability
("cpu" on the CPU), the torch, triton and CUDA versions, the worker's own sources
(`sources_digest`: the campaign's frozen copy of its packages), the kernels as they ran
(compile mode included), and the recipe: the model at the point's context and batch, the
precision and the optimizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from throughput_schema.configs import NonNegFloat, NonNegInt, Recipe, _Record
from throughput_schema.digests import sha256_bytes

ARTIFACT_SUFFIX = ".bin"
SIDECAR_SUFFIX = ".json"
# The packages whose sources the compiled update comes from (the model, its kernels, the
# recipe's records), as folders under a package's `src/`.
SOURCE_PACKAGES = ("tiny_llm", "throughput_schema")


class CacheKey(msgspec.Struct, frozen=True, kw_only=True):
    """What a compiled artifact was compiled for; two jobs with equal keys compile the same code."""

    device: str  # the GPU's compute capability ("sm_90"), or "cpu"
    torch: str
    triton: str
    cuda: str
    sources: str  # `sources_digest` of the worker's packages
    kernels: dict[str, str]  # `Kernels.record()` as the update ran them, "auto" resolved
    recipe: Recipe  # the point: model, context, batch, precision, optimizer

    def digest(self) -> str:
        return sha256_bytes(msgspec.json.encode(self, order="sorted"))


class CacheArtifact(_Record, frozen=True):
    """The sidecar of one artifact: what it was compiled for and the digest of its bytes."""

    key: CacheKey
    sha256: str
    size: NonNegInt
    saved_at: str = ""


CacheState = Literal["cold", "warm", "off"]


class CompileCache(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker's setup did with the compiled artifacts (`WorkerResult.compile_cache`).

    cold: compiled from nothing (`note` says why no artifact was loaded, and whether one was
    saved); warm: loaded `artifact` and compiled nothing again; off: no folder was given, or
    nothing was compiled (the CPU's eager update)."""

    state: CacheState
    # The artifact loaded (warm) or saved (cold), as `artifact_path` names it; "" where none.
    artifact: str = ""
    sha256: str = ""
    key: CacheKey | None = None
    # Seconds spent loading (inside the setup's build phase) and saving (after the setup).
    load_seconds: NonNegFloat = 0.0
    save_seconds: NonNegFloat = 0.0
    note: str = ""


def artifact_name(key: CacheKey) -> str:
    return key.digest() + ARTIFACT_SUFFIX


def sidecar_name(artifact: str) -> str:
    return artifact.removesuffix(ARTIFACT_SUFFIX) + SIDECAR_SUFFIX


def sources_digest(files: Iterable[tuple[str, str]]) -> str:
    """The digest of the worker's sources from (path under `src/`, sha256) pairs: the `.py`
    files of `SOURCE_PACKAGES`, the same whether read from the files a worker imports or from
    a campaign manifest's frozen list."""
    lines = sorted(
        f"{path} {sha}" for path, sha in files if path.endswith(".py") and path.split("/", 1)[0] in SOURCE_PACKAGES
    )
    return sha256_bytes("\n".join(lines))


def frozen_sources(frozen_files: Iterable) -> str:
    """`sources_digest` of a manifest's `frozen_files` (packages/<package>/src/<path>)."""
    pairs = []
    for f in frozen_files:
        parts = f.path.split("/", 3)
        if len(parts) == 4 and parts[0] == "packages" and parts[2] == "src":
            pairs.append((parts[3], f.sha256))
    return sources_digest(pairs)
