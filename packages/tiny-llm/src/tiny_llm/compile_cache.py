"""A worker's use of the compiled artifacts its campaign keeps (`throughput_schema.compile_cache`).

Before the update's first compiled call the worker looks for the artifact of its key, in its
own folder and then in the folders it may only read (an optimizer follow-up's parent
campaign). An artifact is trusted only when its sidecar decodes, names this very key and the
sha256 of the bytes read; torch then loads it into the job's node-local compiler caches
(`torch.compiler.load_cache_artifacts`), and inductor finds there the code it would have
generated, so what runs is the same compiled code. Anything else is ignored with a note and
the job compiles cold; a cold job saves what it compiled (`save_cache_artifacts`) into its own
folder, atomically, unless an artifact of the key is already there. A folder that cannot be
written, a full disk or a quota skips the save with a note: nothing fails for a cache.

Nothing here imports torch until a worker loads, saves or names its GPU: the scripted test
worker keeps its campaign's artifacts with the same code.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from throughput_schema import SchemaError, decode, write_atomic
from throughput_schema.compile_cache import (
    SOURCE_PACKAGES,
    CacheArtifact,
    CacheKey,
    CompileCache,
    artifact_name,
    sidecar_name,
    sources_digest,
)
from throughput_schema.digests import sha256_bytes, sha256_file
from throughput_schema.results import Hardware

# The `--compile-cache` value that turns the cache off, and the worker's default outside a
# campaign: a person's command line writes nothing it was not asked to.
OFF = "off"


@dataclass(frozen=True)
class CacheFolders:
    """Where one worker loads and saves artifacts; `campaign` is what recorded paths are relative to."""

    write: Path | None = None
    read: tuple[Path, ...] = ()
    campaign: Path | None = None

    @property
    def off(self) -> bool:
        return self.write is None and not self.read

    def relative(self, path: Path) -> str:
        return os.path.relpath(path, self.campaign) if self.campaign is not None else str(path)


@dataclass(frozen=True)
class Found:
    path: Path
    data: bytes
    sha256: str


def find(folders: CacheFolders, key: CacheKey, notes: list[str]) -> Found | None:
    """The first trustworthy artifact of `key` in the folders (own first); each one passed
    over adds a note saying why."""
    name = artifact_name(key)
    for folder in (f for f in (folders.write, *folders.read) if f is not None):
        path = folder / name
        if not path.is_file():
            continue
        where = folders.relative(path)
        try:
            sidecar = decode((folder / sidecar_name(name)).read_bytes(), CacheArtifact, source=str(path))
            data = path.read_bytes()
        except (OSError, SchemaError) as exc:
            notes.append(f"ignored {where}: its sidecar or bytes cannot be read ({_reason(exc)})")
            continue
        digest = sha256_bytes(data)
        if sidecar.key != key:
            notes.append(f"ignored {where}: its sidecar names another key (a foreign or renamed artifact)")
        elif sidecar.sha256 != digest:
            notes.append(f"ignored {where}: its sha256 is not its sidecar's (corrupt or cut short)")
        else:
            return Found(path, data, digest)
    return None


def store(folder: Path, key: CacheKey, data: bytes) -> tuple[Path, str]:
    """Write the artifact, then its sidecar, each atomically; raises OSError where the folder
    cannot take them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / artifact_name(key)
    digest = sha256_bytes(data)
    write_atomic(path, data)
    saved_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    write_atomic(
        folder / sidecar_name(path.name), CacheArtifact(key=key, sha256=digest, size=len(data), saved_at=saved_at)
    )
    return path, digest


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@cache
def installed_sources() -> str:
    """`sources_digest` of the packages this worker imports (the campaign's frozen copy in a job)."""
    pairs = []
    for name in SOURCE_PACKAGES:
        package = Path(importlib.import_module(name).__file__ or "").parent
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" not in path.parts:
                pairs.append((path.relative_to(package.parent).as_posix(), sha256_file(path)))
    return sources_digest(pairs)


def device_name(device) -> str:
    """The key's device: the GPU's compute capability ("sm_90"), or "cpu"."""
    if device.type != "cuda":
        return "cpu"
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def cache_key(recipe, kernels: dict[str, str], hw: Hardware, device: str) -> CacheKey:
    """The key of this worker's compile; `device` as `device_name` gives it."""
    return CacheKey(
        device=device,
        torch=hw.torch,
        triton=hw.triton,
        cuda=hw.cuda,
        sources=installed_sources(),
        kernels=dict(sorted(kernels.items())),
        recipe=recipe,
    )


def _graph_misses() -> int:
    """Inductor graphs compiled so far in this process without its cache: missed, or bypassed
    as uncacheable (torch's private counters; 0 where they are missing)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return int(inductor.get("fxgraph_cache_miss", 0)) + int(inductor.get("fxgraph_cache_bypass", 0))


def _torch_load(data: bytes) -> None:
    import torch

    torch.compiler.load_cache_artifacts(data)


def _torch_save() -> bytes | None:
    import torch

    saved = torch.compiler.save_cache_artifacts()
    return saved[0] if saved is not None else None


@dataclass
class CompileCacheUse:
    """One worker's setup with the cache: `load` before the first compiled call, `finish` after
    the setup, `save` when it was cold; `record` is the result's `compile_cache`.

    `load_bytes`, `save_bytes` and `graph_misses` are torch's portable cache and inductor's
    miss counter (the scripted test worker gives its own)."""

    folders: CacheFolders
    load_bytes: Callable[[bytes], None] = _torch_load
    save_bytes: Callable[[], bytes | None] = _torch_save
    graph_misses: Callable[[], int] = _graph_misses
    key: CacheKey | None = None
    loaded: Found | None = None
    saved: tuple[Path, str] | None = None
    notes: list[str] = field(default_factory=list)
    load_seconds: float = 0.0
    save_seconds: float = 0.0
    misses_before: int = 0
    compiled: bool = False
    cold_misses: int = 0

    def hook(self, recipe, hw: Hardware, device) -> Callable:
        """`build`'s `before_compile`: the key from the kernels as they will run, then `load`."""

        def before_compile(kernels) -> None:
            self.compiled = True
            if not self.folders.off:
                self.load(cache_key(recipe, kernels.record(), hw, device_name(device)))

        return before_compile

    def load(self, key: CacheKey) -> None:
        self.key, self.compiled = key, True
        start = time.perf_counter()
        self.misses_before = self.graph_misses()
        found = find(self.folders, key, self.notes)
        if found is not None:
            try:
                self.load_bytes(found.data)
                self.loaded = found
            except Exception as exc:  # noqa: BLE001 - any failure to load is a cold compile, never a failed job
                self.notes.append(f"ignored {self.folders.relative(found.path)}: loading it failed ({_reason(exc)})")
        elif not self.notes:
            self.notes.append("no artifact of this key yet")
        self.load_seconds = time.perf_counter() - start

    def finish(self) -> None:
        """After the setup: a loaded artifact that left graphs to compile made a cold setup."""
        if self.compiled:
            self.cold_misses = self.graph_misses() - self.misses_before
        if self.loaded is not None and self.cold_misses:
            where = self.folders.relative(self.loaded.path)
            self.notes.append(f"loaded {where}, but inductor compiled {self.cold_misses} graph(s) again")

    @property
    def warm(self) -> bool:
        return self.loaded is not None and not self.cold_misses

    def save(self) -> None:
        """Save what this cold setup compiled into the own folder, unless one of the key is there."""
        if self.key is None or self.warm or self.folders.write is None:
            return
        if self.loaded is not None and self.loaded.path.parent == self.folders.write:
            self.notes.append("kept the artifact already saved for this key")
            return
        start = time.perf_counter()
        try:
            data = self.save_bytes()
            if not data:
                self.notes.append("not saved: torch recorded nothing to save")
            else:
                self.saved = store(self.folders.write, self.key, data)
                self.notes.append(f"saved {self.folders.relative(self.saved[0])}")
        except OSError as exc:  # a full disk, a quota, a folder that cannot be written
            self.notes.append(f"not saved: cannot write {self.folders.write} ({_reason(exc)})")
        except Exception as exc:  # noqa: BLE001 - the cache is optional: a failed save never fails the job
            self.notes.append(f"not saved: {_reason(exc)}")
        self.save_seconds = time.perf_counter() - start

    def record(self) -> CompileCache:
        if self.folders.off:
            return CompileCache(state="off", note="no compile cache folder was given")
        if not self.compiled:
            return CompileCache(state="off", note="nothing was compiled (the update ran eagerly)")
        shown = self.loaded if self.warm else None
        path, digest = (shown.path, shown.sha256) if shown is not None else self.saved or (None, "")
        return CompileCache(
            state="warm" if self.warm else "cold",
            artifact=self.folders.relative(path) if path is not None else "",
            sha256=digest,
            key=self.key,
            load_seconds=self.load_seconds,
            save_seconds=self.save_seconds,
            note="; ".join(self.notes),
        )


def kept_without_compiler(folders: CacheFolders, key: CacheKey, compiled: Callable[[], bytes]) -> CompileCache:
    """The record of a setup whose compile is `compiled()` and loads as nothing: a worker without
    torch's compiler (the scripted test worker) keeps its artifacts as this module does."""
    use = CompileCacheUse(folders, load_bytes=lambda data: None, save_bytes=compiled, graph_misses=lambda: 0)
    use.compiled = True
    if not folders.off:
        use.load(key)
        use.finish()
        use.save()
    return use.record()


def folders_for(value: str | None, request_folder: str, request_read: Iterable[str], campaign: str) -> CacheFolders:
    """The folders of `--compile-cache VALUE` (None: the request's, or off without one)."""
    base = Path(campaign) if campaign else None
    if value is None:
        write = Path(request_folder) if request_folder else None
        return CacheFolders(write=write, read=tuple(Path(p) for p in request_read), campaign=base)
    if value == OFF:
        return CacheFolders()
    return CacheFolders(write=Path(value), campaign=base)
