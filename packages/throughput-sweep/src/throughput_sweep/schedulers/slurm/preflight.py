"""Before a Slurm campaign is created: can its first job ever run here, and what will slow it?

`throughput_sweep.preflight.gate` asks it of a new Slurm campaign (`SlurmScheduler.preflight`); it asks the cluster,
in the environment every Slurm command of ours gets (`throughput_slurm.environment`):

  * `scontrol --all show partition -o`: the profile's partition (or the default one)
    exists, is not INACTIVE or DRAIN, and its MaxTime admits `time_limit_minutes`;
  * `sinfo -N -p PART`: some node of it has `gpus_per_job` GPUs (Gres);
  * `sacctmgr show assoc/qos` (where accounting enforces associations and limits): the
    user has an association with the account, and the job's QOS and association admit its
    time (MaxWall) and GPUs (MaxTRES gres/gpu). A submit or run limit (MaxSubmitJobsPerUser,
    MaxJobsPerUser, MaxSubmitJobs, MaxJobs) below `max_concurrent_jobs` only slows the
    campaign: a note says what the watcher does about it;
  * `scontrol show assoc_mgr` (allocation_budget.py): an allocation budget (GrpTRESMins on
    gres/gpu, cpu, billing) with less than one job's worth left is a problem; a worst case
    beyond what is left, a note;
  * for an FP8 precision, that the profile's Python imports torchao where it runs here
    (`throughput_sweep.preflight_precision`);
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
import tempfile
from pathlib import Path

from throughput_schema.layout import JOB_SCRIPT, attempt_dir
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve
from throughput_sweep.preflight_precision import check_precision
from throughput_sweep.schedulers.base import Findings
from throughput_sweep.schedulers.slurm.cluster import ask, check_accounting, check_gpus, check_partition
from throughput_sweep.schedulers.slurm.reasons import refusal_kind, refusal_text
from throughput_sweep.schedulers.slurm.submit import sbatch_argv
from throughput_sweep.worst_case import worst_case_jobs

__all__ = ["check", "preflight"]


# ------------------------------------------------------------ sbatch --test-only

# Which profile field a refusal of sbatch --test-only points at.
_REFUSAL_FIELDS = (
    (re.compile(r"account", re.I), "account"),
    (re.compile(r"partition", re.I), "partition"),
    (re.compile(r"qos", re.I), "extra_submit_args (QOS) or account"),
    (re.compile(r"time limit", re.I), "time_limit_minutes"),
    (
        re.compile(r"node configuration|gres|generic resource|memory|cpu|processors", re.I),
        "gpus_per_job, cpus_per_task or mem",
    ),
)


def _test_only(campaign: Campaign, curves: list[Curve], found: Findings) -> None:
    from throughput_sweep.attempt import attempt_request, campaign_script
    from throughput_sweep.curves import pick

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
        "account, partition, resources or extra_submit_args",
    )
    found.problems.append(
        f"profile {fields}: sbatch --test-only refused the first job: {refusal_text(why)}; fix the profile"
    )


# ------------------------------------------------------------------- budgets


def _budgets(campaign: Campaign, curves: list[Curve], association, part: dict[str, str], found: Findings) -> None:
    from throughput_sweep.schedulers.slurm.allocation_budget import check_budgets, per_job, read_budgets

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


def preflight(campaign: Campaign, curves: list[Curve], *, dry_run: bool) -> Findings | str:
    """`check`, where sbatch is here; a dry run elsewhere only says it was not asked."""
    if dry_run and shutil.which("sbatch") is None:
        return "not run (no sbatch on PATH); the run checks the profile against the cluster first"
    return check(campaign, curves)
