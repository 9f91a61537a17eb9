"""Creating, freezing, opening and locking a campaign folder.

A campaign is created whole or not at all: everything is written into a temporary
sibling folder and renamed into place, so bad input leaves nothing behind. Jobs run
from `frozen/`, the copy of the package sources, drivers, resolved configs and
`uv.lock` taken at creation, so editing the repository never changes a campaign.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from throughput_schema import (
    ClusterProfile,
    FrozenFile,
    Manifest,
    ParentCampaign,
    Protocol,
    SchemaError,
    dumps,
    read,
    write_atomic,
)
from throughput_schema.layout import FROZEN, MANIFEST, RECIPES, SETTLEMENT, load_attempts, load_manifest
from throughput_schema.layout import LOCK as LOCK_FILE
from throughput_schema.recipe import load_recipe, with_point

from throughput_sweep import __version__
from throughput_sweep.curves import AttemptInfo, Curve, Settlement, derive

DEFAULT_MODELS = ("20m", "90m", "250m", "500m")
DEFAULT_CONTEXTS = (512, 1024, 2048, 4096)
EXTRA = "extra"  # frozen/extra/<module>.py: a --worker module from outside packages/
DRIVERS = ("throughput_sweep.py", "throughput_audit.py", "throughput_report.py")


class CampaignError(Exception):
    """A campaign that cannot be created, opened or resumed; the message is one line."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_repo_root(start: Path | None = None) -> Path:
    """The repository root: the nearest folder upward holding uv.lock and packages/."""
    for base in (Path(start or Path.cwd()).resolve(), Path(__file__).resolve()):
        for d in (base, *base.parents):
            if (d / "uv.lock").is_file() and (d / "packages").is_dir() and (d / "configs").is_dir():
                return d
    raise CampaignError("cannot find the repository root (a folder with uv.lock, packages/ and configs/); run from the repository")


# ------------------------------------------------------------------------------- opening


@dataclass(frozen=True)
class Campaign:
    root: Path
    manifest: Manifest

    def __post_init__(self) -> None:
        # Slurm resolves --output inside --chdir, and a job script runs elsewhere: every
        # path handed on is built from this root, so it is made absolute once, here.
        object.__setattr__(self, "root", Path(self.root).absolute())

    @property
    def frozen(self) -> Path:
        return self.root / FROZEN

    @property
    def optimizer(self) -> bool:
        return self.manifest.kind == "optimizer-timing"

    def infos(self) -> list[AttemptInfo]:
        return load_infos(self.root, optimizer=self.optimizer)

    def curves(self, retry: frozenset[Path] = frozenset()) -> list[Curve]:
        return derive(self.manifest, self.infos(), retry)

    def recipe_path(self, model: str) -> Path:
        return self.frozen / RECIPES / f"{model}.json"

    def preset_path(self, model: str) -> Path:
        return self.frozen / "configs" / f"{model}.yaml"


def load_infos(root: Path, *, optimizer: bool) -> list[AttemptInfo]:
    infos = []
    for attempt in load_attempts(root):
        file = attempt.path / SETTLEMENT
        settlement = read(file, Settlement) if file.exists() else None
        infos.append(AttemptInfo(attempt=attempt, settlement=settlement, optimizer=optimizer))
    return infos


def open_campaign(output: Path) -> Campaign:
    output = Path(output)
    if not output.is_dir():
        raise CampaignError(f"{output}: no such campaign folder")
    if not (output / MANIFEST).exists():
        raise CampaignError(f"{output}: not a campaign (no {MANIFEST})")
    return Campaign(root=output, manifest=load_manifest(output))


class CampaignLock:
    """One watcher per campaign: an exclusive, non-blocking flock on `watcher.lock`."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> "CampaignLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CampaignError(
                f"{self.path.parent}: another watcher (pid {holder}) is already running this campaign; only one at a time"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# ------------------------------------------------------------------------------ creation


@dataclass(frozen=True)
class Plan:
    """Everything `create` needs, validated before a single file is written."""

    output: Path
    kind: str
    models: list[str]
    contexts: list[int]
    protocol: Protocol
    profile: ClusterProfile
    max_batch: int | None
    worker: str
    worker_file: Path | None
    root: Path
    parent: ParentCampaign | None = None
    inherited: dict[str, list[int]] | None = None
    parallel: bool = False


def resolve_worker(worker: str) -> tuple[str, Path | None]:
    """(module name, file to freeze or None when it lives in a frozen package)."""
    if worker.endswith(".py"):
        path = Path(worker)
        if not path.is_file():
            raise CampaignError(f"--worker {worker}: file not found")
        return path.stem, path.resolve()
    if worker == "tiny_llm":
        return worker, None
    try:
        spec = importlib.util.find_spec(worker)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise CampaignError(f"--worker {worker}: no such module")
    origin = Path(spec.origin).resolve()
    if "packages" in origin.parts and "src" in origin.parts:
        return worker, None  # inside a workspace package: frozen with the sources
    if origin.name == "__init__.py":
        raise CampaignError(f"--worker {worker}: only single-file modules outside packages/ can be frozen")
    return worker, origin


def plan_throughput(
    output: Path,
    *,
    models: list[str],
    contexts: list[int],
    protocol: Protocol,
    profile: ClusterProfile,
    max_batch: int | None,
    worker: str,
    root: Path,
) -> Plan:
    seen = set()
    for m in models:
        if m in seen:
            raise CampaignError(f"--models: {m} is given twice")
        seen.add(m)
        if not m or not all(c.isalnum() or c in "_." for c in m):
            raise CampaignError(f"--models: {m!r} is not a preset name (letters, digits, '_' and '.')")
    if len(set(contexts)) != len(contexts):
        raise CampaignError("--contexts: a context is given twice")
    for m in models:
        recipe = load_recipe(root / "configs" / f"{m}.yaml")
        for c in contexts:
            with_point(recipe, context_length=c, batch_size=1, protocol=protocol)
    name, file = resolve_worker(worker)
    return Plan(output, "throughput", models, contexts, protocol, profile, max_batch, name, file, root)


def plan_optimizer(
    output: Path,
    *,
    parent_dir: Path,
    parallel: bool,
    protocol: Protocol | None,
    profile: ClusterProfile,
    worker: str,
    root: Path,
    models: list[str] | None,
    contexts: list[int] | None,
) -> Plan:
    parent = open_campaign(parent_dir)
    pm = parent.manifest
    if pm.kind != "throughput":
        raise CampaignError(f"--optimizer-timing-from {parent_dir}: not a throughput campaign (kind {pm.kind})")
    if contexts and sorted(contexts) != sorted(pm.contexts):
        raise CampaignError(
            f"--contexts {' '.join(map(str, contexts))}: an optimizer campaign inherits the parent's contexts "
            f"({' '.join(map(str, pm.contexts))}); drop --contexts"
        )
    if models and sorted(models) != sorted(pm.models):
        raise CampaignError("--models: an optimizer campaign inherits the parent's models; drop --models")
    curves = parent.curves()
    unfinished = [c for c in curves if c.state not in ("bounded", "capped", "blocked") or c.running]
    if unfinished:
        raise CampaignError(
            f"--optimizer-timing-from {parent_dir}: the throughput campaign is not complete "
            f"({', '.join(c.name + ' ' + c.state for c in unfinished)}); finish it first"
        )
    blocked = [c for c in curves if c.state == "blocked"]
    if blocked:
        # A blocked curve's fitting batches are not known to end where memory ends, so
        # neither mode can inherit its grid.
        what = "--parallel-optimizer-points needs" if parallel else "an optimizer follow-up needs"
        raise CampaignError(
            f"{what} a completed memory sweep; {parent_dir} has blocked curves "
            f"({', '.join(c.name for c in blocked)}); retry them first with run --output {parent_dir} --resume --retry-failed"
        )
    inherited = {c.name: list(c.fitting) for c in curves}
    if not any(inherited.values()):
        raise CampaignError(f"--optimizer-timing-from {parent_dir}: the parent has no fitting points")
    name, file = resolve_worker(worker)
    ref = ParentCampaign(
        path=str(Path(parent_dir).resolve()),
        manifest_sha256=sha256_file(Path(parent_dir) / MANIFEST),
        name=pm.name,
    )
    return Plan(
        output,
        "optimizer-timing",
        list(pm.models),
        list(pm.contexts),
        protocol or pm.protocol,
        profile,
        None,
        name,
        file,
        root,
        parent=ref,
        inherited=inherited,
        parallel=parallel,
    )


def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def create(plan: Plan) -> Campaign:
    """Write the campaign folder (manifest and frozen copy) atomically."""
    output = Path(plan.output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise CampaignError(f"{output}: already exists; use --resume to continue it, or choose a new --output")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        os.chmod(tmp, 0o755)
        frozen = tmp / FROZEN
        root = plan.root
        for src in sorted((root / "packages").glob("*/src")):
            _copy_tree(src, frozen / "packages" / src.parent.name / "src")
        for driver in DRIVERS:
            if (root / "scripts" / driver).is_file():
                (frozen / "scripts").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / "scripts" / driver, frozen / "scripts" / driver)
        for yaml_file in sorted((root / "configs").rglob("*.yaml")):
            target = frozen / "configs" / yaml_file.relative_to(root / "configs")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(yaml_file, target)
        shutil.copyfile(root / "uv.lock", frozen / "uv.lock")
        for m in plan.models:
            recipe = load_recipe(root / "configs" / f"{m}.yaml")
            write_atomic(frozen / RECIPES / f"{m}.json", recipe)
        if plan.worker_file is not None:
            (frozen / EXTRA).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plan.worker_file, frozen / EXTRA / f"{plan.worker}.py")
        files = []
        for path in sorted(frozen.rglob("*")):
            if path.is_file():
                os.chmod(path, 0o644)
                files.append(
                    FrozenFile(path=str(path.relative_to(frozen)), sha256=sha256_file(path), size=path.stat().st_size)
                )
            elif path.is_dir():
                os.chmod(path, 0o755)
        manifest = Manifest(
            kind=plan.kind,
            name=output.name,
            created_at=now(),
            models=list(plan.models),
            contexts=list(plan.contexts),
            protocol=plan.protocol,
            profile=plan.profile,
            tool_version=__version__,
            frozen_files=files,
            max_batch=plan.max_batch,
            parent=plan.parent,
            inherited_batches=plan.inherited or {},
            parallel_points=plan.parallel,
            worker=plan.worker,
            source_root=str(root),
        )
        write_atomic(tmp / MANIFEST, manifest)
        (tmp / "curves").mkdir(mode=0o755)
        if output.exists():
            output.rmdir()
        os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Campaign(root=output, manifest=manifest)


def check_resume(campaign: Campaign, *, models: list[str] | None, contexts: list[int] | None, max_batch: int | None) -> None:
    """A resumed campaign keeps its frozen grid; other contexts or models need a new campaign."""
    m = campaign.manifest
    if contexts is not None and sorted(contexts) != sorted(m.contexts):
        raise CampaignError(
            f"{campaign.root}: this campaign's contexts are {' '.join(map(str, m.contexts))}; "
            f"--contexts {' '.join(map(str, contexts))} needs a new campaign (choose a new --output)"
        )
    if models is not None and sorted(models) != sorted(m.models):
        raise CampaignError(
            f"{campaign.root}: this campaign's models are {' '.join(m.models)}; "
            f"--models {' '.join(models)} needs a new campaign (choose a new --output)"
        )
    if max_batch is not None and max_batch != m.max_batch:
        raise CampaignError(
            f"{campaign.root}: this campaign's --max-batch is {m.max_batch}; a different cap needs a new campaign"
        )


def verify_frozen(campaign: Campaign) -> list[str]:
    """Frozen files whose content no longer matches the manifest's hash (should be none)."""
    bad = []
    for f in campaign.manifest.frozen_files:
        path = campaign.frozen / f.path
        if not path.is_file() or sha256_file(path) != f.sha256:
            bad.append(f.path)
    return bad


def manifest_json(manifest: Manifest) -> str:
    return dumps(manifest).decode()


__all__ = [
    "Campaign",
    "CampaignError",
    "CampaignLock",
    "SchemaError",
    "check_resume",
    "create",
    "find_repo_root",
    "open_campaign",
    "plan_optimizer",
    "plan_throughput",
]
