"""Creating a campaign folder: the frozen copy and the manifest, whole or not at all.

Everything is written into a temporary sibling folder and renamed into place, so bad
input leaves nothing behind. Jobs run from `frozen/`, the copy of the package sources,
drivers, resolved configs and `uv.lock` taken here, so editing the repository never
changes a campaign; `campaign.verify_frozen` tells whether the copy is still what was taken.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from throughput_schema import FrozenFile, write_atomic
from throughput_schema.digests import sha256_file
from throughput_schema.layout import CURVES, FROZEN, MANIFEST, RECIPES
from throughput_schema.recipe import load_recipe
from throughput_sweep.campaign import EXTRA, Campaign, CampaignError

if TYPE_CHECKING:
    from throughput_sweep.planning import Plan

DRIVERS = ("throughput_sweep.py", "throughput_audit.py", "throughput_report.py")


def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _freeze_sources(plan: Plan, frozen: Path) -> None:
    """Today's package sources, drivers, configs and uv.lock, and each model's resolved preset
    (or the recipe converted from its config.json)."""
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
    converted = plan.recipes or {}
    for m in plan.models:
        recipe = converted[m] if m in converted else load_recipe(root / "configs" / f"{m}.yaml")
        write_atomic(frozen / RECIPES / f"{m}.json", recipe)
    if plan.worker_file is not None:
        (frozen / EXTRA).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plan.worker_file, frozen / EXTRA / f"{plan.worker}.py")


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
        if plan.frozen_from is not None:
            # A spot check measures with its parent's code, byte for byte, not today's:
            # the files its manifest lists (planning checked their hashes), nothing else.
            for f in plan.frozen_from.manifest.frozen_files:
                (frozen / f.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(plan.frozen_from.frozen / f.path, frozen / f.path)
        else:
            _freeze_sources(plan, frozen)
        files = []
        for path in sorted(frozen.rglob("*")):
            if path.is_file():
                os.chmod(path, 0o644)
                files.append(
                    FrozenFile(path=str(path.relative_to(frozen)), sha256=sha256_file(path), size=path.stat().st_size)
                )
            elif path.is_dir():
                os.chmod(path, 0o755)
        manifest = plan.manifest(frozen_files=files)
        write_atomic(tmp / MANIFEST, manifest)
        (tmp / CURVES).mkdir(mode=0o755)
        if output.exists():
            output.rmdir()
        os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Campaign(root=output, manifest=manifest)
