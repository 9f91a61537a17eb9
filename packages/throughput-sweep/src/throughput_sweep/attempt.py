"""One attempt at one point: its request, its batch script, its intent and its submission.

`submit_attempt` is the one writer of an attempt folder up to the job's start, and each
step is durable before the next (exactly-once submission):

  1. `attempt-<k>/` is made (it must not exist);
  2. `request.json`, the `WorkerRequest`: the recipe with the point and the campaign's
     protocol applied, the deadline, the resources, the paths, all resolved here, once;
  3. `job.sh`, rendered from the request alone;
  4. `intent.json` with a fresh token and the script's hash, fsynced: from here on a job
     may exist, so the attempt is settled by token if nothing follows;
  5. the submission, named by the token;
  6. `receipt.json` with the job id.

A crash before step 4 leaves a folder without an intent, which never ran: the point goes
on in the next attempt. `--dry-run` prints `campaign_script` of the request it would write.

The batch script has no #SBATCH lines: resources go on the sbatch command line as argv
items (`schedulers.slurm.submit.sbatch_argv`), so a profile value is never read as a directive.
Every value in it is passed through `shlex.quote`, comments carry values only as JSON; a
value with a NUL byte, or a PYTHONPATH entry with ':', is refused (`ValueError`).
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
from pathlib import Path

from throughput_schema import (
    PointSpec,
    Receipt,
    Recipe,
    Settlement,
    SubmissionIntent,
    WorkerRequest,
    read,
    write_atomic,
)
from throughput_schema.campaigns import SettlementState
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import (
    BASELINE,
    INTENT,
    JOB_SCRIPT,
    RECEIPT,
    REQUEST,
    RESULT,
    SETTLEMENT,
    attempt_dir,
    job_folders,
)
from throughput_schema.recipe import load_recipe, with_point
from throughput_sweep.campaign import EXTRA, Campaign, now
from throughput_sweep.curves import NextPoint
from throughput_sweep.faults import crash_point
from throughput_sweep.node import watchdog
from throughput_sweep.schedulers.base import Scheduler, SubmitFailed

__all__ = ["Submitted", "attempt_request", "campaign_script", "job_script", "point_recipe", "submit_attempt"]


def point_recipe(campaign: Campaign, model: str, context_length: int, batch_size: int) -> Recipe:
    """The frozen preset with the point and the campaign's protocol applied."""
    path = campaign.recipe_path(model)
    if path.exists():
        recipe = read(path, Recipe)
    elif model in campaign.unfrozen:  # --dry-run of a campaign not yet created: a converted config.json
        recipe = campaign.unfrozen[model]
    else:  # --dry-run of a campaign not yet created: the repository's preset
        recipe = load_recipe(Path(campaign.manifest.source_root) / "configs" / f"{model}.yaml")
    return with_point(recipe, context_length=context_length, batch_size=batch_size, protocol=campaign.manifest.protocol)


def _pythonpath(campaign: Campaign) -> list[str]:
    """frozen/packages/<pkg>/src for every frozen package, then frozen/extra for a --worker file."""
    m = campaign.manifest
    names = sorted({f.path.split("/")[1] for f in m.frozen_files if f.path.startswith("packages/")})
    source = Path(m.source_root)
    if not names and source.is_dir():  # --dry-run before creation: the packages that will be frozen
        names = sorted(p.parent.name for p in (source / "packages").glob("*/src"))
    entries = [campaign.frozen / "packages" / n / "src" for n in names]
    if any(f.path.startswith(f"{EXTRA}/") for f in m.frozen_files) or (not m.frozen_files and m.worker != "tiny_llm"):
        entries.append(campaign.frozen / EXTRA)
    return [str(e) for e in entries]


def compile_cache(campaign: Campaign) -> tuple[str, list[str]]:
    """The request's compile cache folders (`throughput_schema.layout.job_folders`)."""
    m = campaign.manifest
    write, read = job_folders(campaign.root, m, Path(m.parent.path) if m.parent is not None else None)
    return str(write) if write is not None else "", [str(f) for f in read]


def attempt_request(campaign: Campaign, point: NextPoint) -> WorkerRequest:
    m, p = campaign.manifest, campaign.manifest.profile
    cache, cache_read = compile_cache(campaign)
    directory = attempt_dir(campaign.root, point.model, point.context_length, point.batch_size, point.attempt)
    return WorkerRequest(
        point=PointSpec(
            model=point.model,
            context_length=point.context_length,
            batch_size=point.batch_size,
            attempt=point.attempt,
            mode=m.kind,
        ),
        recipe=point_recipe(campaign, point.model, point.context_length, point.batch_size),
        protocol=m.protocol,
        campaign=str(campaign.root),
        python=p.python or sys.executable,
        pythonpath=_pythonpath(campaign),
        worker=m.worker,
        deadline_seconds=p.watchdog_minutes * 60,
        time_limit_seconds=p.time_limit_minutes * 60,
        cpus=p.cpus_per_task,
        result=str(directory / RESULT),
        baseline=str(directory / BASELINE) if campaign.optimizer else "",
        compile_cache=cache,
        compile_cache_read=cache_read,
    )


def _check(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte: {value!r}")
    return value


def campaign_script(campaign: Campaign, request: WorkerRequest) -> str:
    """The exact batch script of this attempt of the campaign (also printed by --dry-run)."""
    return job_script(request, profile=campaign.manifest.profile.name)


def job_script(request: WorkerRequest, *, profile: str) -> str:
    """The batch script of the attempt whose request this is: it execs the watchdog on the request."""
    for entry in request.pythonpath:
        if ":" in entry:
            raise ValueError(f"PYTHONPATH entry contains ':' and cannot be used: {entry!r}")
        _check(entry, "PYTHONPATH entry")
    argv = [request.python, "-m", watchdog.__name__, "--request", str(Path(request.result).parent / REQUEST)]
    p = request.point
    desc = {
        "model": p.model,
        "context_length": p.context_length,
        "batch_size": p.batch_size,
        "attempt": p.attempt,
        "mode": p.mode,
    }
    lines = [
        "#!/bin/bash",
        "# Generated by throughput-sweep; resources are on the sbatch command line.",
        "# point: " + json.dumps(desc, ensure_ascii=True, sort_keys=True),
        "# profile: " + json.dumps(profile, ensure_ascii=True),
        "set -euo pipefail",
        f"cd -- {shlex.quote(_check(request.campaign, 'campaign path'))}",
        f"export PYTHONPATH={shlex.quote(':'.join(request.pythonpath))}",
        "export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 PYTHONUNBUFFERED=1",
        "unset PYTHONHOME",
        "exec " + " ".join(shlex.quote(_check(a, "job script argument")) for a in argv),
    ]
    return "\n".join(lines) + "\n"


def new_token(point: NextPoint) -> str:
    """Unique per attempt and readable in squeue: tsw-<curve>-b<batch>-a<attempt>-<random>."""
    return f"tsw-{point.curve}-b{point.batch_size}-a{point.attempt}-{secrets.token_hex(4)}"


class Submitted:
    """What happened to one submission: the job id, or why there is none."""

    def __init__(self, job_id: str = "", error: str = "", retry_later: bool = False, limit: bool = False) -> None:
        self.job_id, self.error, self.retry_later = job_id, error, retry_later
        # Refused for a submit limit: settled never-submitted, the point waits for a free slot.
        self.limit = limit


async def submit_attempt(campaign: Campaign, scheduler: Scheduler, point: NextPoint) -> Submitted:
    """Request, script, intent, submission, receipt: each step durable before the next."""
    crash_point("before-intent")
    request = attempt_request(campaign, point)
    script = campaign_script(campaign, request)
    directory = Path(request.result).parent
    directory.mkdir(parents=True, exist_ok=False, mode=0o755)
    write_atomic(directory / REQUEST, request)
    write_atomic(directory / JOB_SCRIPT, script, mode=0o755)
    crash_point("after-request")
    token = new_token(point)
    intent = SubmissionIntent(
        token=token,
        campaign=campaign.manifest.name,
        point=request.point,
        script_sha256=sha256_bytes(script),
        created_at=now(),
        scheduler=scheduler.name,
    )
    write_atomic(directory / INTENT, intent)
    crash_point("after-intent")
    try:
        job_id = await scheduler.submit(directory / JOB_SCRIPT, token=token, workdir=directory)
    except SubmitFailed as exc:
        message = str(exc).replace("\n", " ")
        if exc.maybe_submitted and not exc.permanent:
            # The job may exist: keep the intent unsettled; reconciliation finds out.
            return Submitted(error=message, retry_later=True)
        state: SettlementState
        if exc.maybe_submitted:
            state = "ambiguous"
        else:
            state = "refused" if exc.permanent else "never-submitted"
        write_atomic(directory / SETTLEMENT, Settlement(token=token, state=state, reason=message, decided_at=now()))
        return Submitted(error=message, retry_later=not exc.permanent, limit=exc.limit and not exc.permanent)
    crash_point("after-submit")
    write_atomic(directory / RECEIPT, Receipt(token=token, job_id=job_id, submitted_at=now(), scheduler=scheduler.name))
    crash_point("after-receipt")
    return Submitted(job_id=job_id)
