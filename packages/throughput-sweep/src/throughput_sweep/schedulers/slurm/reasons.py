"""What Slurm's refusals and pending reasons mean, as explicit lists.

Every entry is Slurm's own text (src/common/slurm_errno.c and job_reason_string in
src/common/slurm_protocol_defs.c, the same in 22.05.8 and 24.11.5 unless noted), checked
against what the local Slurms 22.05 and 24.11 print (packages/throughput-sweep/tests/test_slurm_reasons.py,
on tools/record-slurm-text.sh's recordings).

sbatch refusals (`refusal_kind`) are one of:
  * "limit": a submit limit; the job was not created and a later submission succeeds once
    fewer of the user's jobs are queued. The watcher lowers its own slot count.
  * "transient": the controller was unreachable, busy or rate-limited; retry later. A
    communication failure may hide an accepted job (`may_hide_a_job`).
  * "permanent": retrying the same job cannot help (bad account, partition, QOS, time
    limit...). A message on no list is permanent too; the record quotes it whole.
    `profile_fields` names the profile fields a permanent refusal (or a pending reason
    of `NEVER_STARTS`) points at, from the same table.

ESLURM_ACCOUNTING_POLICY ("Job violates accounting/QOS policy (job submit limit, user's
size and/or time limits)") covers both a submit limit and a job too large for the QOS or
association (with DenyOnLimit). Since 22.05, slurmctld sends the reason word with it and
sbatch prints it on the line before ("sbatch: error: QOSMaxSubmitJobPerUserLimit"), so:
a size or time reason word makes the refusal permanent, a submit reason word or none a
limit. A size or time limit without its word (an older Slurm) is caught before the
campaign is created by the preflight, which compares the profile with the QOS limits;
counting as a wait what slips through costs a retry every back-off, never a wrong result.

Pending reasons (`never_starts`): a job pending for one of `NEVER_STARTS` waits for a change
of the cluster's configuration or of the job, never for other jobs to end. So does one
pending for an allocation budget that is used up (`BUDGET_USED_UP`: the association's or
QOS's GrpTRESMins, which only an administrator raises): the watcher cancels it and stops
the campaign on its budget (budget.py). A budget of running jobs' minutes
(`BUDGET_WAITS`: GrpTRESRunMins) is a wait: it clears as running jobs end. The watcher
cancels it and settles the point as refused with the fix (`pending_fix`). Reasons that
an administrator clears in the normal course (PartitionDown, ReqNodeNotAvail for a
drained or down node, JobHeldAdmin, a maintenance reservation) stay waits: they are
shown in the progress line, and a job already running on a node that goes down is not
the profile's fault.
"""

from __future__ import annotations

__all__ = [
    "LIMIT_MESSAGES",
    "BUDGET_USED_UP",
    "BUDGET_WAITS",
    "NEVER_STARTS",
    "NEVER_STARTS_FIELDS",
    "PERMANENT_MESSAGES",
    "TRANSIENT_MESSAGES",
    "budget_used_up",
    "budget_wait",
    "may_hide_a_job",
    "never_starts",
    "pending_reason",
    "pending_fix",
    "profile_fields",
    "refusal_kind",
    "refusal_text",
]

# ESLURM_ACCOUNTING_POLICY: decided by the reason word next to it (see above).
ACCOUNTING_POLICY = "Job violates accounting/QOS policy"

# Reason words of a submit limit (slurmctld's acct_policy: the user's, the account's,
# the association's or the QOS's count of queued jobs).
SUBMIT_LIMIT_REASONS = (
    "QOSMaxSubmitJobPerUserLimit",
    "QOSGrpSubmitJobsLimit",
    "AssocMaxSubmitJobLimit",
    "AssocGrpSubmitJobsLimit",
    "MaxSubmitJobsPerAccount",
)

LIMIT_MESSAGES = (
    *SUBMIT_LIMIT_REASONS,
    "MaxSubmitJobs",  # sacctmgr's name for the limit, in site job_submit messages
    "job submit limit",  # ESLURM_ACCOUNTING_POLICY without a reason word
)

# slurmctld could not be reached or answered too late: it may have created the job anyway.
_COMMUNICATION = (
    "Unable to contact slurm controller",  # (connect|send|receive|shutdown failure)
    "Socket timed out on send/recv operation",
    "Communication connection failure",
    "Message send failure",
    "Message receive failure",
    "Zero Bytes were transmitted or received",
    "Connection refused",
    "Connection reset by peer",
    "Transport endpoint is not connected",
    "slurm_persist_conn",
    "Slurm backup controller in standby mode",
    "Controller is in standby mode, try a different controller",
    "did not answer within",  # the sweep's own time-out of a Slurm command
)
TRANSIENT_MESSAGES = (
    *_COMMUNICATION,
    # slurmctld is busy: sbatch itself retries these a few times before giving up.
    "Slurm temporarily unable to accept job",
    "Slurm job queue full",
    "Unable to create job record, try again",
    "Job creation temporarily disabled",
    "Resource temporarily unavailable",
    "Slurm controller is busy",
    # rl_enable (23.02 and later): a per-user RPC rate limit.
    "Rate limit exceeded, please retry later",
    "Rate limit exceeded, please retry momentarily",
)

# Size and time reason words that come with ESLURM_ACCOUNTING_POLICY under DenyOnLimit:
# the job itself is too large for the QOS or association.
_JOB_TOO_LARGE = ("PerJob", "PerNode", "QOSMin", "TimeLimit", "WallLimit")

# Each with the profile fields it points at ("" where the profile is not the cause):
# the same submission is refused again on every retry until they change.
PERMANENT_MESSAGES: dict[str, str] = {
    "Invalid account or account/partition combination specified": "account, partition",
    "Invalid account": "account",
    "Invalid partition name": "partition",
    "invalid partition specified": "",
    "Invalid qos specification": "account (its QOS) or a --qos in extra_submit_args",
    "Invalid wckey specification": "",
    "Requested node configuration is not available": "gpus_per_job, cpus_per_task, mem",
    "Requested time limit is invalid": "time_limit_minutes",
    "Invalid generic resource": "gpus_per_job",
    "Invalid Trackable RESource (TRES) specification": "",
    "Invalid feature specification": "",
    "Memory specification can not be satisfied": "mem",
    "Memory required by task is not available": "",
    "More processors requested than permitted": "cpus_per_task",
    "Node count specification invalid": "",
    "CPU count specification invalid": "",
    "Access/permission denied": "",
    "not permitted to use this partition": "account, partition",
    "Access denied to requested reservation": "",
    "Requested reservation is invalid": "",
    "Required partition not available (inactive or drain)": "",
    "Invalid user id": "",
    "Job cannot be submitted without the current working directory specified.": "",
    # sbatch's own checks of its command line and script.
    "Invalid --": "",
    "unrecognized option": "",
    "invalid option": "",
    "Unable to open file": "",
    "Batch script is empty": "",
    "This does not look like a batch script": "",
}


def _has(text: str, needles: tuple[str, ...]) -> bool:
    low = text.lower()
    return any(n.lower() in low for n in needles)


def refusal_kind(stderr: str, returncode: int | None = 1) -> str:
    """'limit', 'transient' or 'permanent' for a failed sbatch (see the module's docstring).

    `returncode=None` means sbatch itself did not finish in time: transient.
    """
    if returncode is None:
        return "transient"
    text = stderr.strip()
    if ACCOUNTING_POLICY.lower() in text.lower():
        words = [w for line in text.splitlines() if (w := line.rsplit(":", 1)[-1].strip()) and " " not in w]
        if any(any(p in w for p in _JOB_TOO_LARGE) for w in words if w not in SUBMIT_LIMIT_REASONS):
            return "permanent"
        return "limit"
    if _has(text, tuple(PERMANENT_MESSAGES)):
        return "permanent"
    if _has(text, LIMIT_MESSAGES):
        return "limit"
    if _has(text, TRANSIENT_MESSAGES):
        return "transient"
    return "permanent"


def may_hide_a_job(stderr: str, returncode: int | None) -> bool:
    """After this failure the controller may still have created the job: look it up by token."""
    return returncode is None or _has(stderr, _COMMUNICATION)


def refusal_text(stderr: str, stdout: str = "") -> str:
    """The whole of what sbatch said, on one line."""
    lines = [line.strip() for line in (stderr.strip() or stdout.strip()).splitlines() if line.strip()]
    return " / ".join(lines)


# ------------------------------------------------------------------- pending reasons

_FIX_PROFILE = "fix the profile and start a new campaign (a new --output)"

NEVER_STARTS: dict[str, str] = {
    # The partition's own limits.
    "PartitionTimeLimit": "the profile's time_limit_minutes exceeds the partition's MaxTime: lower it or pick another partition",
    "PartitionNodeLimit": "the job asks for more nodes than the partition allows: pick another partition",
    "PartitionConfig": "the job asks for more than the partition's nodes have (GPUs, CPUs, memory): fix gpus_per_job, cpus_per_task or mem, or pick another partition",
    # The association or QOS no longer admits the job.
    "InvalidAccount": "the account is not valid (any more) for this user or partition: fix account",
    "InvalidQOS": "the QOS is not valid (any more) for this account: fix the account or the QOS in extra_submit_args",
    "QOSNotAllowed": "the QOS is not allowed on this partition or account: fix the QOS or the partition",
    "AccountNotAllowed": "the account is not allowed on this partition: fix account or partition",
    "BadConstraints": "no node can satisfy the job's constraints or resources: fix extra_submit_args, gpus_per_job, cpus_per_task or mem",
    "DependencyNeverSatisfied": "a dependency in extra_submit_args can never be satisfied: remove it",
    # Per-job limits of the association or QOS: the job alone exceeds them.
    "AssocMaxWallDurationPerJobLimit": "the association's MaxWall is below the profile's time_limit_minutes: lower it",
    "QOSMaxWallDurationPerJobLimit": "the QOS's MaxWall is below the profile's time_limit_minutes: lower it or use another QOS",
    "AssocMaxCpuPerJobLimit": "the association's MaxTRES cpu is below cpus_per_task: lower it",
    "QOSMaxCpuPerJobLimit": "the QOS's MaxTRES cpu is below cpus_per_task: lower it",
    "AssocMaxNodePerJobLimit": "the association allows fewer nodes per job: pick another account",
    "QOSMaxNodePerJobLimit": "the QOS allows fewer nodes per job: pick another QOS",
    "AssocMaxCpuMinutesPerJobLimit": "cpus_per_task times time_limit_minutes exceeds the association's MaxTRESMins: lower one",
    "QOSMaxCpuMinutesPerJobLimit": "cpus_per_task times time_limit_minutes exceeds the QOS's MaxTRESMins: lower one",
    "AssocMaxGRESPerJob": "gpus_per_job exceeds the association's MaxTRES gres/gpu: lower it",
    "QOSMaxGRESPerJob": "gpus_per_job exceeds the QOS's MaxTRES gres/gpu: lower it",
    "AssocMaxMemPerJob": "mem exceeds the association's MaxTRES mem: lower it",
    "QOSMaxMemoryPerJob": "mem exceeds the QOS's MaxTRES mem: lower it",
    "QOSMaxGRESPerNode": "gpus_per_job exceeds the QOS's MaxTRESPerNode gres/gpu: lower it",
    "QOSMinGRES": "gpus_per_job is below the QOS's MinTRES gres/gpu: raise it",
    "QOSMinCpuNotSatisfied": "cpus_per_task is below the QOS's MinTRES cpu: raise it",
    "QOSMinMemory": "mem is below the QOS's MinTRES mem: raise it",
}

# The profile fields a reason of `NEVER_STARTS` points at, where the profile is the cause.
NEVER_STARTS_FIELDS: dict[str, str] = {
    "PartitionTimeLimit": "time_limit_minutes",
    "AssocMaxWallDurationPerJobLimit": "time_limit_minutes",
    "QOSMaxWallDurationPerJobLimit": "time_limit_minutes",
    "InvalidAccount": "account",
    "InvalidQOS": "account (its QOS) or a --qos in extra_submit_args",
    "BadConstraints": "gpus_per_job, cpus_per_task, mem",
}

# Allocation budgets: the association's or QOS's GrpTRESMins per TRES (job_reason_string; the
# same words in 22.05.8 and 24.11.5: "AssocGrpGRESMinutes", "QOSGrpCPUMinutesLimit", ...).
_BUDGET_TRES = {
    "Assoc": ("CPU", "Mem", "Node", "Energy", "GRES", "License", "BB", "Billing", "Unknown"),
    "QOS": ("CPU", "Memory", "Node", "Energy", "GRES", "License", "BB", "Billing", "Unknown"),
}


def _budget_words(run: str) -> tuple[str, ...]:
    # Only the CPU words end in "Limit".
    return tuple(
        f"{who}Grp{tres}{run}Minutes{'Limit' if tres == 'CPU' else ''}"
        for who, names in _BUDGET_TRES.items()
        for tres in names
    )


# Used up: usage decays only over days (PriorityDecayHalfLife), so for a campaign only an
# administrator raising the limit lets these jobs start.
BUDGET_USED_UP = _budget_words("")
# GrpTRESRunMins: the minutes left to the running jobs' time limits; they clear as those end.
BUDGET_WAITS = _budget_words("Run")

BUDGET_FIX = (
    "the allocation budget is used up: ask for more (its GrpTRESMins), then resume; or run the "
    "campaign with a profile that uses another account, in a new --output"
)

# Shown, never acted on: they clear when other jobs end or an administrator acts.
WAITS = (
    "Priority",
    "Resources",
    "Dependency",
    "BeginTime",
    "Reservation",
    "Licenses",
    "JobHeldUser",
    "JobHeldAdmin",
    "PartitionDown",
    "PartitionInactive",
    "ReqNodeNotAvail",
    "NodeDown",
    "QOSMaxJobsPerUserLimit",
    "AssocMaxJobsLimit",
    "QOSGrpJobsLimit",
    "AssocGrpJobsLimit",
    "QOSGrpGRES",
    "AssocGrpGRES",
    "QOSMaxGRESPerUser",
    "QOSGrpCpuLimit",
    "AssocGrpCpuLimit",
)


def _word(reason: str) -> str:
    # squeue prints "ReqNodeNotAvail, UnavailableNodes:node1" and "(null)" for no reason.
    return reason.strip().strip("()").split(",")[0].strip()


def pending_reason(reason: str) -> str:
    """squeue's reason as shown: '' for none ('None' before the first scheduling pass, '(null)')."""
    return "" if _word(reason) in ("", "None", "null") else reason.strip()


def budget_used_up(reason: str) -> bool:
    """Pending for an allocation budget that is used up (`BUDGET_USED_UP`)."""
    return _word(reason) in BUDGET_USED_UP


def budget_wait(reason: str) -> bool:
    """Pending for a budget of running jobs' minutes (`BUDGET_WAITS`): clears as they end."""
    return _word(reason) in BUDGET_WAITS


def never_starts(reason: str) -> bool:
    """A pending job with this squeue reason waits for a change that waiting cannot bring."""
    return _word(reason) in NEVER_STARTS or budget_used_up(reason)


def pending_fix(reason: str) -> str:
    """The one-line fix for a reason `never_starts` holds."""
    word = _word(reason)
    if budget_used_up(word):
        return BUDGET_FIX
    return f"{NEVER_STARTS.get(word, 'the job cannot start as asked')}; {_FIX_PROFILE}"


def profile_fields(message: str) -> str:
    """The profile fields a refusal's message (sbatch's, or a pending reason of
    `NEVER_STARTS` quoted in it) points at; '' when the profile is not the cause."""
    text = message.lower()
    table = (*PERMANENT_MESSAGES.items(), *NEVER_STARTS_FIELDS.items())
    return next((fields for pattern, fields in table if fields and pattern.lower() in text), "")
