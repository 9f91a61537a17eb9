"""An existing campaign folder, opened: its manifest, its frozen copy, its attempts and curves.

Creating one is `planning` (validate, build the manifest) then `freezing` (write it all
at once); one watcher at a time is `locking`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from throughput_schema import CurveClosure, Manifest, Recipe, Settlement, read
from throughput_schema.digests import sha256_file
from throughput_schema.layout import FROZEN, MANIFEST, RECIPES, SETTLEMENT, load_attempts, load_closures, load_manifest
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.curves import Curve, derive

EXTRA = "extra"  # frozen/extra/<module>.py: a --worker module from outside packages/


class CampaignError(Exception):
    """A campaign that cannot be created, opened or resumed; the message is one line."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def find_repo_root(start: Path | None = None) -> Path:
    """The repository root: the nearest folder upward holding uv.lock and packages/."""
    for base in (Path(start or Path.cwd()).resolve(), Path(__file__).resolve()):
        for d in (base, *base.parents):
            if (d / "uv.lock").is_file() and (d / "packages").is_dir() and (d / "configs").is_dir():
                return d
    raise CampaignError(
        "cannot find the repository root (a folder with uv.lock, packages/ and configs/); run from the repository"
    )


# ------------------------------------------------------------------------------- opening


@dataclass(frozen=True)
class Campaign:
    root: Path
    manifest: Manifest
    # A --dry-run's campaign, not yet created: the recipes planning converted from a
    # config.json (by model name), as `freezing` will freeze them.
    unfrozen: dict[str, Recipe] = field(default_factory=dict)

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

    def closures(self) -> dict[str, CurveClosure]:
        return load_closures(self.root)

    def curves(self, retry: frozenset[Path] = frozenset()) -> list[Curve]:
        return derive(self.manifest, self.infos(), retry, self.closures())

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


def verify_frozen(campaign: Campaign) -> list[str]:
    """Frozen files whose content no longer matches the manifest's hash (should be none)."""
    bad = []
    for f in campaign.manifest.frozen_files:
        path = campaign.frozen / f.path
        if not path.is_file() or sha256_file(path) != f.sha256:
            bad.append(f.path)
    return bad
