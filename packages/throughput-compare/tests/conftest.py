"""Audited campaigns built on disk by the shared builder (tests/campaign_builder), and
ways to re-measure them: faster, with another protocol, with repeated attempts."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from campaign_builder.complete import BuiltCampaign, build_optimizer, build_throughput
from campaign_builder.files import rewrite, sha256, write_attempt_files
from campaign_builder.results import throughput_result
from throughput_audit.audit import run_audit, write_outputs
from throughput_schema import (
    Fp8Linears,
    FrozenFile,
    Manifest,
    Receipt,
    Recipe,
    SubmissionIntent,
    WorkerResult,
    read,
    write_atomic,
)
from throughput_schema.layout import FROZEN, INTENT, JOB_SCRIPT, MANIFEST, RECEIPT, RECIPES, RESULT, parse_curve_name
from throughput_schema.muon import ownership
from throughput_schema.precision import FP8_RECIPES, fp8_plan, recipe_linears
from throughput_schema.shape import weight_shapes
from throughput_slurm.sacct import job_accounting


def audited(built: BuiltCampaign, *, allow_test_worker: bool = False) -> Path:
    outcome = run_audit(built.root, runner=built.sacct(), settle_seconds=0, allow_test_worker=allow_test_worker)
    assert outcome.report.summary.failed == 0, [c.message for c in outcome.report.checks if c.status == "fail"][:3]
    write_outputs(built.root, outcome)
    return built.root


def ok_results(built: BuiltCampaign):
    for curve, batches in built.points.items():
        for batch, folder in batches.items():
            result = read(folder / RESULT, WorkerResult)
            if result.throughput is not None:
                yield batch, parse_curve_name(curve)[1], folder, result


def remeasure(built: BuiltCampaign, *, slower: float = 1.0, **changes) -> None:
    """Every fitting point measured again, its windows `slower` times as long (a changed
    setup_seconds keeps its phases' proportions, so they still add up to it)."""
    for batch, context, folder, result in ok_results(built):
        again = throughput_result(result.recipe, result.protocol, batch, context, slower=slower)
        ran = dict(started_at=result.started_at, finished_at=result.finished_at)  # in the same job
        if changes.get("setup_seconds") is not None and again.setup_seconds:
            scale = changes["setup_seconds"] / again.setup_seconds
            ran["setup_phases"] = {k: v * scale for k, v in again.setup_phases.items()}
        write_atomic(folder / RESULT, msgspec.structs.replace(again, **{**ran, **changes}))


def change_protocol(built: BuiltCampaign, **changes) -> None:
    manifest = read(built.root / MANIFEST, Manifest)
    protocol = msgspec.structs.replace(manifest.protocol, **changes)
    rewrite(built.root / MANIFEST, Manifest, protocol=protocol)
    for folder in all_results(built):
        rewrite(folder / RESULT, WorkerResult, protocol=protocol)


def change_precision(built: BuiltCampaign, precision: str) -> None:
    """The campaign as one at another precision: the protocol, each point's recipe, and its
    FP8 linears as the filter picks them for that recipe."""
    change_protocol(built, precision=precision)
    for folder in all_results(built):
        recipe = read(folder / RESULT, WorkerResult).recipe
        converted, kept = fp8_plan(precision, recipe_linears(weight_shapes(recipe.model)))
        rewrite(
            folder / RESULT,
            WorkerResult,
            recipe=msgspec.structs.replace(
                recipe, training=msgspec.structs.replace(recipe.training, precision=precision)
            ),
            fp8=Fp8Linears(recipe=FP8_RECIPES[precision], converted=converted, kept=kept),
        )


def change_recipe(built: BuiltCampaign, **model_changes) -> None:
    """Every point's recipe with other model fields (ones that do not change its size)."""
    for folder in all_results(built):
        recipe = read(folder / RESULT, WorkerResult).recipe
        rewrite(
            folder / RESULT,
            WorkerResult,
            recipe=msgspec.structs.replace(recipe, model=msgspec.structs.replace(recipe.model, **model_changes)),
        )
    # The audit holds each result to the campaign's frozen preset, so the preset changes too.
    manifest = read(built.root / MANIFEST, Manifest)
    frozen = []
    for entry in manifest.frozen_files:
        path = built.root / FROZEN / entry.path
        if entry.path.startswith(f"{RECIPES}/"):
            preset = read(path, Recipe)
            write_atomic(
                path, msgspec.structs.replace(preset, model=msgspec.structs.replace(preset.model, **model_changes))
            )
            entry = FrozenFile(path=entry.path, sha256=sha256(path), size=path.stat().st_size)
        frozen.append(entry)
    rewrite(built.root / MANIFEST, Manifest, frozen_files=frozen)


def change_optimizer(built: BuiltCampaign, name: str) -> None:
    """The campaign trained with another optimizer: its protocol and every point's recipe say so,
    and each result records the parameters each optimizer owned, as the worker does."""
    change_protocol(built, optimizer=name)
    for folder in all_results(built):
        recipe = read(folder / RESULT, WorkerResult).recipe
        recipe = msgspec.structs.replace(recipe, optimizer=msgspec.structs.replace(recipe.optimizer, name=name))
        rewrite(folder / RESULT, WorkerResult, recipe=recipe, optimizer_owned=ownership(recipe.optimizer, recipe.model))


def all_results(built: BuiltCampaign) -> list[Path]:
    return [folder for batches in built.points.values() for folder in batches.values()]


def repeat(built: BuiltCampaign, curve: str, batch: int, *, slower: float) -> Path:
    """The point measured again in a fresh job (attempt-2), its windows `slower` times as long."""
    first = built.points[curve][batch]
    second = first.parent / "attempt-2"
    intent = read(first / INTENT, SubmissionIntent)
    receipt = read(first / RECEIPT, Receipt)
    result = read(first / RESULT, WorkerResult)
    token = intent.token.replace("-a1-", "-a2-")
    script = (first / JOB_SCRIPT).read_text().replace(intent.token, token)
    job = str(max(int(j) for j in built.rows) + 1)
    first_job = receipt.job_id
    row = msgspec.structs.replace(built.rows[first_job], job_id=job, job_name=token, comment=token)
    built.rows[job] = row
    write_attempt_files(
        second,
        script=script,
        intent=msgspec.structs.replace(
            intent,
            token=token,
            point=msgspec.structs.replace(intent.point, attempt=2),
            script_sha256=hashlib.sha256(script.encode()).hexdigest(),
        ),
        receipt=msgspec.structs.replace(receipt, token=token, job_id=job, accounting=job_accounting(row)),
        result=msgspec.structs.replace(
            throughput_result(result.recipe, result.protocol, batch, parse_curve_name(curve)[1], slower=slower),
            started_at=result.started_at,
            finished_at=result.finished_at,  # its job has the first one's times
        ),
    )
    return second


class Lab:
    """Builds audited campaigns under one folder; `edit` changes one before its audit."""

    audited = staticmethod(audited)
    remeasure = staticmethod(remeasure)
    change_protocol = staticmethod(change_protocol)
    change_precision = staticmethod(change_precision)
    change_recipe = staticmethod(change_recipe)
    change_optimizer = staticmethod(change_optimizer)
    repeat = staticmethod(repeat)

    def __init__(self, root: Path) -> None:
        self.root = root

    def build(
        self, name: str, *, edit=None, optimizer_of: BuiltCampaign | None = None, allow_test_worker: bool = False, **kw
    ) -> Path:
        built = (
            build_optimizer(self.root / name, optimizer_of)
            if optimizer_of
            else build_throughput(self.root / name, **kw)
        )
        if edit:
            edit(built)
        return audited(built, allow_test_worker=allow_test_worker)

    def unaudited(self, name: str, **kw) -> BuiltCampaign:
        return build_throughput(self.root / name, **kw)


@pytest.fixture
def lab(tmp_path) -> Lab:
    return Lab(tmp_path)
