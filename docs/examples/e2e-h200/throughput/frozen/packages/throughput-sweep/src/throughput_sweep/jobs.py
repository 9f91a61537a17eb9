"""The worker command lines and the batch script of one campaign point.

Everything refers to the campaign's frozen copy: the preset YAML under frozen/configs,
the resolved recipe under frozen/recipes, and the sources on PYTHONPATH. The campaign's
protocol (seed, LR, betas, epsilon, weight decay, clipping) is applied to every model
through `--set`, so the worker sees the full resolved recipe.
"""

from __future__ import annotations

import sys
from pathlib import Path

from throughput_schema import PointSpec, Recipe, read
from throughput_schema.layout import BASELINE, RESULT, attempt_dir
from throughput_schema.recipe import load_recipe, override_args, with_point

from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import NextPoint
from throughput_sweep.jobscript import WorkerStep, render_job_script

WORKER_COMMAND = "benchmark-throughput-worker"


def point_recipe(campaign: Campaign, model: str, context_length: int, batch_size: int) -> Recipe:
    path = campaign.recipe_path(model)
    if path.exists():
        recipe = read(path, Recipe)
    else:  # --dry-run of a campaign not yet created: the repository's preset
        recipe = load_recipe(Path(campaign.manifest.source_root) / "configs" / f"{model}.yaml")
    return with_point(recipe, context_length=context_length, batch_size=batch_size, protocol=campaign.manifest.protocol)


def worker_argv(campaign: Campaign, point: NextPoint, output: Path, *, optimizer_timing: bool) -> list[str]:
    m = campaign.manifest
    recipe = point_recipe(campaign, point.model, point.context_length, point.batch_size)
    argv = [m.profile.python, "-m", m.worker, WORKER_COMMAND, "--config", str(campaign.preset_path(point.model).absolute())]
    for item in override_args(recipe):
        argv += ["--set", item]
    argv += [
        "--output",
        str(output),
        "--warmup",
        str(m.protocol.warmup),
        "--windows",
        str(m.protocol.windows),
        "--window-seconds",
        _num(m.protocol.window_seconds),
    ]
    if optimizer_timing:
        argv.append("--optimizer-timing")
    return argv


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def point_spec(campaign: Campaign, point: NextPoint) -> PointSpec:
    """The point as recorded in its intent and its batch script (the mode is the campaign's kind)."""
    return PointSpec(
        model=point.model,
        context_length=point.context_length,
        batch_size=point.batch_size,
        attempt=point.attempt,
        mode=campaign.manifest.kind,
    )


def job_script(campaign: Campaign, point: NextPoint) -> str:
    """The exact script submitted for this point (also printed by --dry-run)."""
    m = campaign.manifest
    directory = attempt_dir(campaign.root, point.model, point.context_length, point.batch_size, point.attempt).absolute()
    spec = point_spec(campaign, point)
    if campaign.optimizer:
        steps = [
            WorkerStep(worker_argv(campaign, point, directory / BASELINE, optimizer_timing=False), directory / BASELINE, "baseline"),
            WorkerStep(worker_argv(campaign, point, directory / RESULT, optimizer_timing=True), directory / RESULT, "instrumented"),
        ]
    else:
        steps = [WorkerStep(worker_argv(campaign, point, directory / RESULT, optimizer_timing=False), directory / RESULT)]
    return render_job_script(
        m.profile,
        campaign=campaign.root,
        pythonpath=_pythonpath(campaign),
        recipe=campaign.recipe_path(point.model).absolute(),
        steps=steps,
        python=m.profile.python or sys.executable,
        point=spec,
    )


def _pythonpath(campaign: Campaign) -> list[Path]:
    """frozen/packages/<pkg>/src for every package, then frozen/extra for a --worker file."""
    frozen = campaign.frozen.absolute()
    source = Path(campaign.manifest.source_root)
    names = sorted({f.path.split("/")[1] for f in campaign.manifest.frozen_files if f.path.startswith("packages/")})
    if not names and source.is_dir():
        names = sorted(p.parent.name for p in (source / "packages").glob("*/src"))
    entries = [frozen / "packages" / n / "src" for n in names]
    if any(f.path.startswith("extra/") for f in campaign.manifest.frozen_files) or (
        not campaign.manifest.frozen_files and campaign.manifest.worker not in ("tiny_llm",)
    ):
        entries.append(frozen / "extra")
    return entries
