"""Complete campaigns, with everything the audit checks, built from schema records.

`build_throughput` writes a manifest, frozen files with their hashes, and per point
an intent, job script, receipt (with final accounting; a local campaign's jobs also in
the local scheduler's registry) and result whose derived figures agree with their raw
windows, timed within the job; `build_optimizer` adds an optimizer-timing
campaign inheriting a parent's fitting batches, with baselines and raw bursts.
`BuiltCampaign.sacct` answers `sacct -j ...` from the accounting rows the builder laid out.

The results come from `results`, whose arithmetic is not the audit's own.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from campaign_builder.fake_sacct import FakeSacct
from campaign_builder.files import sha256, write_attempt_files
from campaign_builder.results import bursts_for, failed_result, optimizer_timing, preset, throughput_result
from throughput_schema import (
    BurstSample,
    ClusterProfile,
    CudaOom,
    CurveSummary,
    FrozenFile,
    Manifest,
    ParentCampaign,
    PointSpec,
    Protocol,
    Receipt,
    SubmissionIntent,
    Timeout,
    WorkerResult,
    dumps,
    write_atomic,
)
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.layout import (
    FROZEN,
    JOB_SCRIPT,
    MANIFEST,
    RECIPES,
    RESULT,
    RESULTS_JSON,
    attempt_dir,
    curve_name,
)
from throughput_schema.local_jobs import LOCAL_JOBS_DIR, LocalEnd, LocalJob, end_path, job_log, job_path
from throughput_schema.local_jobs import job_accounting as local_job_accounting
from throughput_schema.recipe import at_point
from throughput_slurm.sacct import AccountingRow, job_accounting

TRES = "billing=8,cpu=8,gres/gpu=1,mem=64G,node=1"
T0 = datetime(2026, 10, 8, 12, 0, 0, tzinfo=UTC)
# An optimizer point's job runs two workers, each as long as a throughput point's.
OPTIMIZER_JOB_SECONDS = 290
OPTIMIZER_STAGGER_SECONDS = 300


@dataclass
class BuiltCampaign:
    root: Path
    manifest: Manifest
    rows: dict[str, AccountingRow] = field(default_factory=dict)
    # curve -> batch -> attempt folder
    points: dict[str, dict[int, Path]] = field(default_factory=dict)

    def sacct(self) -> FakeSacct:
        return FakeSacct(self.rows)


class _Jobs:
    def __init__(self, start_id: int) -> None:
        self.next_id = start_id

    def take(self) -> str:
        job = str(self.next_id)
        self.next_id += 1
        return job


def _frozen(root: Path, models: list[str]) -> list[FrozenFile]:
    frozen = root / FROZEN
    files = {
        "packages/throughput-sweep/src/throughput_sweep/__init__.py": '__version__ = "0.1.0"\n',
        "packages/tiny-llm/src/tiny_llm/__init__.py": '"""worker"""\n',
        "uv.lock": "version = 1\n",
    }
    for rel, text in files.items():
        write_atomic(frozen / rel, text)
    for m in models:
        write_atomic(frozen / RECIPES / f"{m}.json", preset(m))
    out = []
    for p in sorted(frozen.rglob("*")):
        if p.is_file():
            out.append(FrozenFile(path=str(p.relative_to(frozen)), sha256=sha256(p), size=p.stat().st_size))
    return out


def _profile(scheduler: str, max_concurrent: int) -> ClusterProfile:
    return ClusterProfile(
        name="test", scheduler=scheduler, account="throughput", partition="gpu", max_concurrent_jobs=max_concurrent
    )


def _write_attempt(
    built: BuiltCampaign,
    jobs: _Jobs,
    *,
    model: str,
    context: int,
    batch: int,
    result: WorkerResult,
    start: datetime,
    state: tuple[str, str],
    mode: str,
    seconds: int,
    baseline: WorkerResult | None = None,
    bursts: list[BurstSample] | None = None,
) -> Path:
    m = built.manifest
    folder = attempt_dir(built.root, model, context, batch, 1)
    # Unique, as the controller's are: a donor campaign of the same name, or an earlier run
    # on a real Slurm, must not lend this attempt's token to a job it has no receipt for.
    token = f"tp-{model}-c{context}-b{batch}-a1-{m.name}-{secrets.token_hex(4)}"
    script = f"#!/bin/bash\n#SBATCH --job-name={token}\npython -m {m.worker} run-point\n"
    intent = SubmissionIntent(
        token=token,
        campaign=m.name,
        point=PointSpec(model=model, context_length=context, batch_size=batch, mode=mode),
        script_sha256=hashlib.sha256(script.encode()).hexdigest(),
        created_at=start.isoformat(),
        scheduler=m.profile.scheduler,
    )
    job = jobs.take()
    spent = _spent_seconds(result, baseline)
    assert spent <= seconds, f"the builder's workers spent {spent:.1f} s, more than their {seconds} s job"
    elapsed = seconds
    end = start + timedelta(seconds=elapsed)
    # The worker ran inside its job, as a real one does.
    ran = dict(
        started_at=(start + timedelta(seconds=5)).isoformat(), finished_at=(end - timedelta(seconds=5)).isoformat()
    )
    result = msgspec.structs.replace(result, **ran)
    baseline = msgspec.structs.replace(baseline, **ran) if baseline is not None else None
    row = AccountingRow(
        job_id=job,
        job_name=token,
        state=state[0],
        exit_code=state[1],
        partition=m.profile.partition,
        account=m.profile.account,
        timelimit="00:14:00",
        alloc_tres=TRES,
        req_mem="64G",
        start=start.isoformat(),
        end=end.isoformat(),
        elapsed=f"{elapsed // 3600:02d}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}",
        comment=token,
        node_list="node1",
    )
    accounting = job_accounting(row)
    if m.profile.scheduler == "local":
        row, accounting = _registered(built.root, m.profile, row, folder, start, end)
    built.rows[job] = row
    receipt = Receipt(
        token=token,
        job_id=job,
        submitted_at=start.isoformat(),
        scheduler=m.profile.scheduler,
        accounting=accounting,
        accounting_final=True,
    )
    write_attempt_files(
        folder, script=script, intent=intent, receipt=receipt, result=result, baseline=baseline, bursts=bursts
    )
    built.points.setdefault(curve_name(model, context), {})[batch] = folder
    return folder


def _spent_seconds(*results: WorkerResult | None) -> float:
    """The workers' own seconds, one after another: a job must hold what ran in it."""
    return sum(
        (r.startup_seconds or 0.0)
        + (r.setup_seconds or 0.0)
        + (r.calibration.seconds if r.calibration is not None else 0.0)
        + sum(w.seconds for w in r.windows)
        for r in results
        if r is not None
    )


def _registered(
    root: Path, profile: ClusterProfile, row: AccountingRow, folder: Path, start, end
) -> tuple[AccountingRow, JobAccounting]:
    """A local campaign's job in its scheduler's registry: its row as the audit rebuilds it,
    and the accounting the scheduler would record."""
    jobs_dir = root / LOCAL_JOBS_DIR
    job = LocalJob(
        job_id=row.job_id,
        token=row.job_name,
        script=str(folder / JOB_SCRIPT),
        workdir=str(folder),
        output=str(folder / job_log(row.job_id)),
        slot=0,
        gpus="0",
        submitted_at=start.isoformat(),
        time_limit_seconds=profile.time_limit_minutes * 60,
        wrapper_pid=0,
        wrapper_start=0,
        cpus=profile.cpus_per_task,
        mem=profile.mem,
        machine_cpus=2,
        machine_mem="24105M",
        host=row.node_list,
    )
    ended = LocalEnd(
        job_id=row.job_id,
        state=row.state,
        exit_code=row.exit_code,
        start=start.isoformat(),
        end=end.isoformat(),
        elapsed_seconds=(end - start).total_seconds(),
    )
    write_atomic(job_path(jobs_dir, row.job_id), job)
    write_atomic(end_path(jobs_dir, row.job_id), ended)
    # The audit prints a local job as sacct would; imported here so that a member tested alone
    # without the audit (the report's, the compare's) can still build the campaigns it needs.
    from throughput_audit.local_registry import accounting_row

    return (accounting_row(job, ended, account=profile.account), local_job_accounting(job, ended))


def build_throughput(
    root: Path,
    *,
    models: tuple[str, ...] = ("20m",),
    contexts: tuple[int, ...] = (512, 1024),
    first_oom: int | dict[str, int] = 8,
    unstable: dict[str, list[int]] | None = None,
    scheduler: str = "slurm",
    max_concurrent: int = 12,
    start_id: int = 1000,
    job_seconds: int = 150,
    stagger_seconds: int = 160,
) -> BuiltCampaign:
    """Every curve fits 1 .. first_oom/2 and hits a CUDA OOM at first_oom."""
    root = Path(root)
    protocol = Protocol()
    manifest = Manifest(
        kind="throughput",
        name=root.name,
        created_at=T0.isoformat(),
        models=list(models),
        contexts=list(contexts),
        protocol=protocol,
        profile=_profile(scheduler, max_concurrent),
        tool_version="0.1.0",
        frozen_files=_frozen(root, list(models)),
    )
    write_atomic(root / MANIFEST, manifest)
    built = BuiltCampaign(root=root, manifest=manifest)
    jobs = _Jobs(start_id)
    summaries = []
    for ci, (model, context) in enumerate((m, c) for m in models for c in contexts):
        name = curve_name(model, context)
        oom = first_oom[name] if isinstance(first_oom, dict) else first_oom
        recipe = preset(model)
        batch, k = 1, 0
        fitting = []
        best = None
        unstable_here = (unstable or {}).get(name, [])
        while batch <= oom:
            point = at_point(recipe, context_length=context, batch_size=batch, protocol=protocol)
            start = T0 + timedelta(seconds=ci + stagger_seconds * k)
            if batch < oom:
                res = throughput_result(point, protocol, batch, context, unstable=batch in unstable_here)
                state = ("COMPLETED", "0:0")
                fitting.append(batch)
                if not res.throughput.unstable and (best is None or res.throughput.tokens_per_second > best[1]):
                    best = (batch, res.throughput.tokens_per_second)
            else:
                res = failed_result(point, protocol, CudaOom(phase="setup", message="CUDA out of memory"))
                state = ("FAILED", "3:0")
            _write_attempt(
                built,
                jobs,
                model=model,
                context=context,
                batch=batch,
                result=res,
                start=start,
                state=state,
                mode="throughput",
                seconds=job_seconds,
            )
            batch *= 2
            k += 1
        summaries.append(
            CurveSummary(
                curve=name,
                model=model,
                context_length=context,
                state="bounded",
                fitting_batches=fitting,
                fastest_stable_batch=best[0] if best else None,
                fastest_tokens_per_second=best[1] if best else None,
                largest_fitting_batch=fitting[-1] if fitting else None,
                first_oom_batch=oom,
                unstable_batches=list(unstable_here),
            )
        )
    write_atomic(root / RESULTS_JSON, dumps({"campaign": manifest.name, "curves": summaries}))
    return built


def build_optimizer(
    root: Path, parent: BuiltCampaign, *, start_id: int = 5000, scheduler: str = "slurm"
) -> BuiltCampaign:
    root = Path(root)
    pm = parent.manifest
    protocol = pm.protocol
    inherited = {
        name: sorted(
            b for b, f in pts.items() if msgspec.json.decode((f / RESULT).read_bytes())["outcome"]["kind"] == "ok"
        )
        for name, pts in parent.points.items()
    }
    manifest = Manifest(
        kind="optimizer-timing",
        name=root.name,
        created_at=T0.isoformat(),
        models=list(pm.models),
        contexts=list(pm.contexts),
        protocol=protocol,
        profile=_profile(scheduler, pm.profile.max_concurrent_jobs),
        tool_version="0.1.0",
        frozen_files=_frozen(root, list(pm.models)),
        parent=ParentCampaign(
            path=str(parent.root.resolve()), manifest_sha256=sha256(parent.root / MANIFEST), name=pm.name
        ),
        inherited_batches=inherited,
    )
    write_atomic(root / MANIFEST, manifest)
    built = BuiltCampaign(root=root, manifest=manifest)
    jobs = _Jobs(start_id)
    for ci, (model, context) in enumerate((m, c) for m in pm.models for c in pm.contexts):
        name = curve_name(model, context)
        for k, batch in enumerate(inherited.get(name, [])):
            point = at_point(preset(model), context_length=context, batch_size=batch, protocol=protocol)
            base = throughput_result(point, protocol, batch, context)
            inst = throughput_result(point, protocol, batch, context, mode="optimizer-timing", slower=1.02)
            bursts = bursts_for(inst, optimizer_ms=0.5 + 0.1 * batch)
            inst = msgspec.structs.replace(
                inst, optimizer_timing=optimizer_timing(inst, bursts, batch, context, protocol)
            )
            start = T0 + timedelta(hours=1, seconds=ci + OPTIMIZER_STAGGER_SECONDS * k)
            _write_attempt(
                built,
                jobs,
                model=model,
                context=context,
                batch=batch,
                result=inst,
                start=start,
                state=("COMPLETED", "0:0"),
                mode="optimizer-timing",
                seconds=OPTIMIZER_JOB_SECONDS,
                baseline=base,
                bursts=bursts,
            )
    return built


__all__ = [
    "BuiltCampaign",
    "Timeout",
    "build_optimizer",
    "build_throughput",
    "bursts_for",
    "optimizer_timing",
    "preset",
]
