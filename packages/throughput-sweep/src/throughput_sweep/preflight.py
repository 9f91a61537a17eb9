"""Before a Slurm campaign is created: can its first job ever run here, and what will slow it?

`run` (and `run --dry-run`) of a new campaign calls `gate(preview)`; it asks the cluster,
in the environment every Slurm command of ours gets (`throughput_schema.slurm_env`):

  * `scontrol --all show partition -o`: the profile's partition (or the default one)
    exists, is not INACTIVE or DRAIN, and its MaxTime admits `time_limit_minutes`;
  * `sinfo -N -p PART`: some node of it has `gpus_per_job` GPUs (Gres);
  * `sacctmgr show assoc/qos` (where accounting enforces associations and limits): the
    user has an association with the account, and the job's QOS and association admit its
    time (MaxWall) and GPUs (MaxTRES gres/gpu). A submit or run limit (MaxSubmitJobsPerUser,
    MaxJobsPerUser, MaxSubmitJobs, MaxJobs) below `max_concurrent_jobs` only slows the
    campaign: a note says what the watcher does about it;
  * `scontrol show assoc_mgr` (preflight_budget.py): an allocation budget (GrpTRESMins on
    gres/gpu, cpu, billing) with less than one job's worth left is a problem; a worst case
    beyond what is left, a note;
  * for an FP8 precision, that the profile's Python imports torchao where it runs here
    (preflight_precision.py);
  * `sbatch --test-only` with the exact batch script (written to a temporary folder) and
    sbatch command line (`sbatch_argv`) of the first point, once nothing else is wrong.

Each problem is one line naming the profile field and the cluster's limit; with any, the
campaign is not created and `run` exits 2. A question the cluster did not answer is a
note ("not checked"), never a pass. `sbatch --test-only` accepts a time limit above the
partition's MaxTime (the job would pend forever with PartitionTimeLimit), hence the
separate MaxTime check.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from throughput_schema.campaigns import CURVE_ENDED
from throughput_schema.layout import JOB_SCRIPT, attempt_dir
from throughput_schema.slurm_reasons import refusal_kind, refusal_text
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve
from throughput_sweep.preflight_cluster import Findings, ask, check_accounting, check_gpus, check_partition
from throughput_sweep.preflight_precision import check_precision
from throughput_sweep.schedulers import backend

__all__ = ["Findings", "Verdict", "check", "gate", "worst_case"]

PROG = "throughput-sweep"


# ------------------------------------------------------------ sbatch --test-only

# Which profile field a refusal of sbatch --test-only points at.
_REFUSAL_FIELDS = (
    (re.compile(r"account", re.I), "account"),
    (re.compile(r"partition", re.I), "partition"),
    (re.compile(r"qos", re.I), "extra_sbatch_args (QOS) or account"),
    (re.compile(r"time limit", re.I), "time_limit_minutes"),
    (
        re.compile(r"node configuration|gres|generic resource|memory|cpu|processors", re.I),
        "gpus_per_job, cpus_per_task or mem",
    ),
)


def _test_only(campaign: Campaign, curves: list[Curve], found: Findings) -> None:
    from throughput_sweep.attempt import attempt_request, campaign_script
    from throughput_sweep.curves import pick
    from throughput_sweep.schedulers.slurm import sbatch_argv

    profile = campaign.manifest.profile
    first = pick(curves, profile.max_concurrent_jobs)
    if not first:
        return
    n = first[0]
    folder = attempt_dir(campaign.root, n.model, n.context_length, n.batch_size, n.attempt)
    try:
        text = campaign_script(campaign, attempt_request(campaign, n))
    except ValueError as exc:  # a value the job script cannot carry (a NUL byte, ':' in PYTHONPATH)
        found.problems.append(f"the first job's batch script cannot be written: {exc}")
        return
    with tempfile.TemporaryDirectory(prefix="tsw-preflight-") as tmp:
        script = Path(tmp) / JOB_SCRIPT
        script.write_text(text)
        script.chmod(0o755)
        argv = sbatch_argv(profile, script, token="tsw-preflight", workdir=folder)
        ok, _, why = ask([argv[0], "--test-only", *argv[1:]])
    if ok:
        found.checked.append("sbatch --test-only accepted the first job")
        return
    if refusal_kind(why) != "permanent":  # a submit limit the user's other jobs fill, a busy controller
        found.notes.append(
            f"sbatch --test-only could not place the first job now ({refusal_text(why)}): a wait, not a refusal; the watcher retries"
        )
        return
    fields = next(
        (f for pattern, f in _REFUSAL_FIELDS if pattern.search(why)),
        "account, partition, resources or extra_sbatch_args",
    )
    found.problems.append(
        f"profile {fields}: sbatch --test-only refused the first job: {refusal_text(why)}; fix the profile"
    )


# ------------------------------------------------------------------- budgets


def _budgets(campaign: Campaign, curves: list[Curve], association, part: dict[str, str], found: Findings) -> None:
    from throughput_sweep.preflight_budget import check_budgets, per_job, read_budgets

    a = association
    budgets, why = read_budgets(
        a.user, a.account, a.qos, part.get("PartitionName", campaign.manifest.profile.partition)
    )
    if why:
        found.notes.append(f"the allocation budgets (GrpTRESMins) were not checked ({why})")
        return
    jobs, bounded = worst_case_jobs(campaign, curves)
    what = "the dry run's worst case" if bounded else "without --max-batch, the first round of jobs (one per curve)"
    profile = campaign.manifest.profile
    check_budgets(budgets, per_job(profile, part, a.config), jobs, what, profile, found)


# ---------------------------------------------------------------------- entry


def check(campaign: Campaign, curves: list[Curve]) -> Findings:
    """Everything above for a Slurm campaign not yet created (`campaign` is its preview)."""
    profile = campaign.manifest.profile
    found = Findings()
    if shutil.which("sbatch") is None:
        found.problems.append(
            "sbatch was not found on PATH, and the profile's scheduler is slurm: run on the cluster's login node"
        )
        return found
    part = check_partition(profile, found)
    if part is not None:
        check_gpus(profile, part["PartitionName"], found)
    association = check_accounting(profile, part["PartitionName"] if part else profile.partition, found)
    if association is None:
        found.notes.append(
            "the allocation budgets (GrpTRESMins) were not checked: the account's limits could not be read"
        )
    else:
        _budgets(campaign, curves, association, part or {}, found)
    check_precision(profile, campaign.manifest.protocol.precision, found)
    if not found.problems:
        _test_only(campaign, curves, found)
    return found


@dataclass(frozen=True)
class Verdict:
    """What the preflight says (`lines`, for stderr) and run's exit status (2: refused)."""

    lines: list[str]
    exit_status: int = 0

    def print(self) -> None:
        for line in self.lines:
            print(line, file=sys.stderr)


def gate(campaign: Campaign, *, dry_run: bool, skip: bool = False) -> Verdict:
    """The preflight of a campaign about to be created (`campaign` is its preview).

    `skip` (run's hidden --no-preflight) lets a test reach sbatch's own refusal at submission."""
    from throughput_sweep.curves import derive

    profile = campaign.manifest.profile
    if skip:
        return Verdict(["[sweep] preflight: skipped (--no-preflight)"])
    if not backend(profile.scheduler).preflight:
        return Verdict([f"[sweep] preflight: does not apply to the {profile.scheduler} scheduler"])
    if dry_run and shutil.which("sbatch") is None:
        return Verdict(
            ["[sweep] preflight: not run (no sbatch on PATH); the run checks the profile against the cluster first"]
        )
    found = check(campaign, derive(campaign.manifest, []))
    lines = [f"[sweep] note: {note}" for note in found.notes]
    if found.problems:
        what = "nothing was written" if dry_run else "the campaign was not created"
        lines += [f"{PROG}: {problem}" for problem in found.problems]
        lines.append(f"[sweep] preflight: the first job could never run on this cluster; {what}")
        return Verdict(lines, 2)
    return Verdict(lines + [f"[sweep] preflight passed: {'; '.join(found.checked)}"])


# ----------------------------------------------------------------- worst case


def worst_case_jobs(campaign: Campaign, curves: list[Curve]) -> tuple[int, bool]:
    """(jobs, bounded): the dry run's worst case in jobs, or, unbounded without --max-batch,
    the jobs of one doubling of every open curve."""
    m = campaign.manifest
    open_curves = [c for c in curves if c.state not in CURVE_ENDED or c.running]
    if any(c.planned is None for c in open_curves) and m.max_batch is None:
        return len(open_curves), False
    jobs = 0
    for c in open_curves:
        if c.planned is not None:
            batches = list(c.planned)
        else:  # --max-batch is set here: without it, the unbounded worst case returned above
            batches = [1 << k for k in range((m.max_batch or 0).bit_length())]
        jobs += sum(1 for b in batches if b not in c.fitting)
    return jobs, True


def worst_case(campaign: Campaign, curves: list[Curve]) -> str:
    """The dry run's bound: jobs at most, and those jobs each running to the time limit."""
    p = campaign.manifest.profile
    hours = p.time_limit_minutes * p.gpus_per_job / 60
    each = f"of up to {p.time_limit_minutes} min on {p.gpus_per_job} GPU(s)"
    jobs, bounded = worst_case_jobs(campaign, curves)
    if not bounded:
        return (
            f"worst case: unbounded without --max-batch (a curve doubles until its first CUDA OOM): each doubling "
            f"of the {jobs} open curve(s) is at most {jobs} job(s) {each}, {jobs * hours:.1f} GPU-hours"
        )
    return (
        f"worst case: at most {jobs} job(s) {each}: {jobs * hours:.1f} GPU-hours (every job running to its time limit)"
    )
