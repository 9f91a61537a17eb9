"""Planning a campaign: every check on the command line's request before anything is written.

A new campaign becomes a `Plan` (presets, contexts and the worker checked; an optimizer
campaign's parent complete), from which both `freezing.create` and `--dry-run` take the
manifest; a resumed one is held to what its manifest froze (`check_resume`). A model is a
preset's name, or a Hugging Face config.json converted here (`model_spec`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from throughput_schema import (
    ClusterProfile,
    FrozenFile,
    Manifest,
    ModelSource,
    ParentCampaign,
    Protocol,
    Recipe,
    SpotCheck,
    read,
)
from throughput_schema.campaigns import CampaignKind
from throughput_schema.curve_names import MODEL_NAME_RULE, is_model_name
from throughput_schema.digests import sha256_file
from throughput_schema.hf_config import HfConfigError, import_config
from throughput_schema.layout import MANIFEST
from throughput_schema.muon import MUON, NoMuonMatrix, muon_matrices
from throughput_schema.recipe import RecipeError, load_recipe, recipe_from_dict, with_point
from throughput_schema.time_zones import local_zone
from throughput_sweep import __version__
from throughput_sweep.campaign import Campaign, CampaignError, now, open_campaign, verify_frozen
from throughput_sweep.frozen_profile import refuse_other_profile
from throughput_sweep.schedulers import backend

DEFAULT_MODELS = ("20m", "90m", "250m", "500m")
DEFAULT_CONTEXTS = (512, 1024, 2048, 4096)


@dataclass(frozen=True)
class Plan:
    """Everything `create` needs, validated before a single file is written."""

    output: Path
    kind: CampaignKind
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
    # A spot check: the parent whose frozen files are copied as they are, and what was sampled.
    frozen_from: Campaign | None = None
    spot_check: SpotCheck | None = None
    # Models given as a config.json: the file, and the recipe converted from it (by model name).
    sources: dict[str, ModelSource] | None = None
    recipes: dict[str, Recipe] | None = None

    def manifest(self, frozen_files: Sequence[FrozenFile] = ()) -> Manifest:
        """The campaign's manifest: written by `freezing.create`, shown by --dry-run."""
        return Manifest(
            kind=self.kind,
            name=Path(self.output).name,
            created_at=now(),
            models=list(self.models),
            contexts=list(self.contexts),
            protocol=self.protocol,
            profile=self.profile,
            tool_version=__version__,
            frozen_files=list(frozen_files),
            max_batch=self.max_batch,
            parent=self.parent,
            inherited_batches=self.inherited or {},
            parallel_points=self.parallel,
            worker=self.worker,
            source_root=str(self.root),
            spot_check=self.spot_check,
            # The field keeps its name: manifests on disk say it so.
            scheduler_environment_removed=backend(self.profile.scheduler).environment_removed(),
            model_sources=self.sources or {},
            watcher_zone=local_zone(),
        )

    def preview(self) -> Campaign:
        """The campaign as --dry-run shows it: nothing is written."""
        # A spot check shows the job script its parent's frozen copy will run.
        frozen = self.frozen_from.manifest.frozen_files if self.frozen_from else ()
        return Campaign(root=self.output, manifest=self.manifest(frozen), unfrozen=self.recipes or {})


def is_config_json(spec: str) -> bool:
    """A --models entry naming a Hugging Face config.json rather than a preset."""
    return spec.endswith(".json")


def model_spec(spec: str) -> tuple[Recipe, ModelSource]:
    """A config.json given to --models: its converted recipe (named for its folder) and source."""
    path = Path(spec)
    try:
        imported = import_config(path)
        recipe = recipe_from_dict(imported.raw, source=spec)
    except (HfConfigError, RecipeError) as exc:
        raise CampaignError(f"--models {exc}") from None
    return recipe, ModelSource(path=str(path.resolve()), sha256=imported.sha256)


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
    if max_batch is not None and max_batch & (max_batch - 1):
        raise CampaignError(f"--max-batch {max_batch}: must be a power of two (batches double from 1)")
    seen = set()
    names, sources, converted = [], {}, {}
    for m in models:
        if is_config_json(m):
            recipe, source = model_spec(m)
            sources[recipe.name], converted[recipe.name] = source, recipe
            m = recipe.name
        if m in seen:
            raise CampaignError(f"--models: {m} is given twice")
        seen.add(m)
        if not is_model_name(m):
            raise CampaignError(f"--models: {m!r} is not a preset name ({MODEL_NAME_RULE})")
        names.append(m)
    if len(set(contexts)) != len(contexts):
        raise CampaignError("--contexts: a context is given twice")
    for m in names:
        recipe = converted[m] if m in converted else load_recipe(root / "configs" / f"{m}.yaml")
        for c in contexts:
            with_point(recipe, context_length=c, batch_size=1, protocol=protocol)
        check_optimizer(m, recipe, protocol)
    name, file = resolve_worker(worker)
    return Plan(
        output,
        "throughput",
        names,
        contexts,
        protocol,
        profile,
        max_batch,
        name,
        file,
        root,
        sources=sources,
        recipes=converted,
    )


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
    if models and sorted(model_names(models, parent)) != sorted(pm.models):
        raise CampaignError("--models: an optimizer campaign inherits the parent's models; drop --models")
    curves = parent.curves()
    unfinished = [c for c in curves if not c.done]
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
    if (protocol or pm.protocol).optimizer == MUON:
        for m in pm.models:
            check_optimizer(m, read(parent.recipe_path(m), Recipe), protocol or pm.protocol)
    name, file = resolve_worker(worker)
    ref = ParentCampaign(
        path=str(Path(parent_dir).resolve()), manifest_sha256=sha256_file(Path(parent_dir) / MANIFEST), name=pm.name
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
        # A config.json model is measured as the parent converted it, whatever the file says now.
        sources=dict(pm.model_sources),
        recipes={m: read(parent.recipe_path(m), Recipe) for m in pm.model_sources},
    )


def check_optimizer(model: str, recipe: Recipe, protocol: Protocol) -> None:
    """Muon must own at least one matrix of every model (`throughput_schema.muon`)."""
    if protocol.optimizer == MUON:
        try:
            muon_matrices(recipe.model)
        except NoMuonMatrix as exc:
            raise CampaignError(f"--models {model}: {exc}") from None


def check_resume(
    campaign: Campaign,
    *,
    models: list[str] | None,
    contexts: list[int] | None,
    max_batch: int | None,
    profile: str | None = None,
    parent: Path | None = None,
    protocol: Protocol | None = None,
) -> None:
    """A resumed campaign keeps its frozen grid, profile (once a job ran), parent and protocol, and
    its frozen copy must be intact; anything else needs a new campaign."""
    m = campaign.manifest
    if models is not None:
        models = model_names(models, campaign)
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
    refuse_other_profile(campaign, profile)  # while nothing ran, `frozen_profile.resume_profile` may replace it
    if parent and (m.parent is None or Path(m.parent.path) != parent.resolve()):
        raise CampaignError(f"{campaign.root}: this campaign was not created from {parent}")
    if protocol not in (None, m.protocol):
        raise CampaignError(
            f"{campaign.root}: the protocol is frozen in the manifest; a different protocol needs a new campaign"
        )
    bad = verify_frozen(campaign)
    if bad:
        raise CampaignError(
            f"{campaign.root}: frozen files changed since creation ({', '.join(bad[:3])}); the campaign cannot be trusted"
        )


def model_names(models: list[str], campaign: Campaign) -> list[str]:
    """--models as the campaign's model names; a config.json must still be the file it froze."""
    names = []
    for spec in models:
        if not is_config_json(spec):
            names.append(spec)
            continue
        recipe, source = model_spec(spec)
        frozen = campaign.manifest.model_sources.get(recipe.name)
        if frozen is not None and frozen.sha256 != source.sha256:
            raise CampaignError(
                f"{campaign.root}: {spec} changed since this campaign converted it (sha256 {frozen.sha256[:16]}..., "
                f"now {source.sha256[:16]}...); a changed model needs a new campaign"
            )
        names.append(recipe.name)
    return names
