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
  * `sbatch --test-only` with the exact batch script (written to a temporary folder) and
    sbatch command line (`sbatch_argv`) of the first point, once nothing else is wrong.

Each problem is one line naming the profile field and the cluster's limit; with any, the
campaign is not created and `run` exits 2. A question the cluster did not answer is a
note ("not checked"), never a pass. `sbatch --test-only` accepts a time limit above the
partition's MaxTime (the job would pend forever with PartitionTimeLimit), hence the
separate MaxTime check.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from throughput_schema import ClusterProfile
from throughput_schema.campaigns import CURVE_ENDED
from throughput_schema.layout import JOB_SCRIPT, attempt_dir
from throughput_schema.slurm_env import slurm_environment
from throughput_sweep.campaign import Campaign
from throughput_sweep.curves import Curve
from throughput_sweep.schedulers.slurm_reasons import refusal_kind, refusal_text
from throughput_sweep.schedulers.slurm_text import slurm_minutes

__all__ = ["Findings", "Verdict", "check", "gate", "worst_case"]

PROG = "throughput-sweep"
TIMEOUT = 60.0


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)  # the first job could never run
    notes: list[str] = field(default_factory=list)  # it runs, slower or unchecked in part
    checked: list[str] = field(default_factory=list)  # what the cluster confirmed


def _ask(argv: list[str]) -> tuple[bool, str, str]:
    """(answered, stdout, stderr or what went wrong); the environment is the watcher's.
    A note or problem quotes it on one line (`refusal_text`)."""
    env, _ = slurm_environment(os.environ)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)
    except subprocess.TimeoutExpired:
        return False, "", f"{argv[0]} did not answer within {TIMEOUT:.0f} s"
    except OSError as exc:
        return False, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
    return proc.returncode == 0, proc.stdout, proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def _minutes(text: str) -> str:
    value = slurm_minutes(text)
    return f"{value:g} minutes" if value is not None else text


# ------------------------------------------------------------------ partition


def _partition(profile: ClusterProfile, found: Findings) -> dict[str, str] | None:
    ok, out, why = _ask(["scontrol", "--all", "show", "partition", "-o"])
    if not ok:
        found.notes.append(f"the partitions were not checked (scontrol: {refusal_text(why)})")
        return None
    parts = {f.get("PartitionName", ""): f for f in map(_fields, out.splitlines()) if f.get("PartitionName")}
    names = ", ".join(sorted(parts))
    if profile.partition:
        part = parts.get(profile.partition)
        if part is None:
            found.problems.append(
                f"profile partition={profile.partition}: no such partition on this cluster (partitions: {names}): "
                "set partition to one of them"
            )
            return None
    else:
        part = next((p for p in parts.values() if p.get("Default") == "YES"), None)
        if part is None:
            found.problems.append(
                f"profile partition is empty and this cluster has no default partition: set partition to one of {names}"
            )
            return None
    name = part["PartitionName"]
    state = part.get("State", "UP")
    if state in ("INACTIVE", "DRAIN"):
        found.problems.append(
            f"profile partition={name}: the partition is {state} and accepts no jobs: choose another partition"
        )
    elif state != "UP":
        found.notes.append(f"partition {name} is {state}: jobs wait in the queue until it is UP")
    limit = slurm_minutes(part.get("MaxTime", "UNLIMITED"))
    if limit is not None and profile.time_limit_minutes > limit:
        found.problems.append(
            f"profile time_limit_minutes={profile.time_limit_minutes} exceeds partition {name}'s MaxTime of {limit:g} minutes: "
            "lower it (and watchdog_minutes) or choose another partition"
        )
    found.checked.append(f"partition {name} (MaxTime {_minutes(part.get('MaxTime', 'UNLIMITED'))})")
    return part


_GPU = re.compile(r"^gpu(?::[^:(]*)?:(\d+)")


def _node_gpus(gres: str) -> int:
    """'gpu:16', 'gpu:h100:4(S:0-1),shard:8' -> GPUs on the node."""
    return sum(int(m.group(1)) for item in gres.split(",") if (m := _GPU.match(item.strip())))


def _gpus(profile: ClusterProfile, partition: str, found: Findings) -> None:
    ok, out, why = _ask(["sinfo", "--noheader", "--Node", f"--partition={partition}", "--format=%N|%G"])
    if not ok:
        found.notes.append(f"the partition's GPUs were not checked (sinfo: {refusal_text(why)})")
        return
    most = max((_node_gpus(line.split("|", 1)[1]) for line in out.splitlines() if "|" in line), default=0)
    if most < profile.gpus_per_job:
        found.problems.append(
            f"profile gpus_per_job={profile.gpus_per_job}: no node of partition {partition} has that many GPUs "
            f"(at most {most} on a node): lower it or choose a GPU partition"
        )
    else:
        found.checked.append(f"{most} GPUs on its largest node")


# ------------------------------------------------------------- account and QOS

_ASSOC = ("Account", "Partition", "QOS", "DefaultQOS", "MaxJobs", "MaxSubmit", "MaxWall", "MaxTRES")
_QOS = ("Name", "MaxWall", "MaxTRES", "MaxJobsPU", "MaxSubmitPU")


def _rows(out: str, names: tuple[str, ...]) -> list[dict[str, str]]:
    return [dict(zip(names, line.split("|"))) for line in out.splitlines() if line.count("|") >= len(names) - 1]


def _qos_flag(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("--qos="):
            return arg.split("=", 1)[1]
        if arg in ("--qos", "-q") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-q") and len(arg) > 2 and not arg.startswith("--"):
            return arg[2:]
    return ""


def _config() -> dict[str, str]:
    ok, out, _ = _ask(["scontrol", "show", "config"])
    found = {}
    for line in out.splitlines() if ok else ():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def _accounting(profile: ClusterProfile, partition: str, found: Findings) -> None:
    config = _config()
    enforce = config.get("AccountingStorageEnforce", "")
    cluster = config.get("ClusterName", "")
    if "associations" not in enforce and "limits" not in enforce and "safe" not in enforce:
        found.notes.append("the account and QOS limits were not checked (this cluster does not enforce associations)")
        return
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a container without a passwd entry for us
        found.notes.append(f"the account and QOS limits were not checked (no user name for uid {os.getuid()})")
        return
    where = ["where", f"user={user}"] + ([f"cluster={cluster}"] if cluster else [])
    ok, out, why = _ask(
        ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", *where, f"format={','.join(_ASSOC)}"]
    )
    if not ok:
        found.notes.append(f"the account and QOS limits were not checked (sacctmgr: {refusal_text(why)})")
        return
    assocs = _rows(out, _ASSOC)
    account = profile.account
    if not account:
        ok, out, why = _ask(["sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=DefaultAccount"])
        account = out.strip().splitlines()[0].strip() if ok and out.strip() else ""
        if not account:
            found.notes.append(
                f"the account was not checked (no default account of user {user} found: {refusal_text(why)})"
            )
            return
    mine = [a for a in assocs if a["Account"] == account]
    row = next((a for a in mine if a["Partition"] == partition), None) or next(
        (a for a in mine if not a["Partition"]), None
    )
    if row is None:
        accounts = ", ".join(sorted({a["Account"] for a in assocs})) or "none"
        field_ = (
            f"profile account={account}" if profile.account else "profile account is empty and your default account"
        )
        found.problems.append(
            f"{field_}: user {user} has no association with it on cluster {cluster or '?'} "
            f"(your accounts: {accounts}): set account to one of them"
        )
        return
    qos = _qos_flag(list(profile.extra_sbatch_args)) or row["DefaultQOS"]
    allowed = [q for q in row["QOS"].split(",") if q]
    if not qos:
        # Slurm's choice without a default: the only QOS the association allows, else normal.
        qos = allowed[0] if len(allowed) == 1 else "normal"
    found.checked.append(f"account {account}, QOS {qos}")
    if "limits" not in enforce and "safe" not in enforce:
        return
    _limits(
        profile, f"the association of account {account}", row, ("MaxWall", "MaxTRES", "MaxSubmit", "MaxJobs"), found
    )
    ok, out, why = _ask(
        ["sacctmgr", "--noheader", "--parsable2", "show", "qos", "where", f"name={qos}", f"format={','.join(_QOS)}"]
    )
    rows = _rows(out, _QOS) if ok else []
    if not rows:
        found.notes.append(
            f"the limits of QOS {qos} were not checked (sacctmgr: {refusal_text(why) if not ok else 'no such QOS'})"
        )
        return
    _limits(profile, f"QOS {qos}", rows[0], ("MaxWall", "MaxTRES", "MaxSubmitPU", "MaxJobsPU"), found)


_LIMIT_NAMES = {
    "MaxSubmitPU": "MaxSubmitJobsPerUser",
    "MaxJobsPU": "MaxJobsPerUser",
    "MaxSubmit": "MaxSubmitJobs",
    "MaxJobs": "MaxJobs",
}


def _limits(profile: ClusterProfile, whose: str, row: dict[str, str], keys: tuple[str, ...], found: Findings) -> None:
    wall_key, tres_key, submit_key, run_key = keys
    wall = slurm_minutes(row.get(wall_key, ""))
    if wall is not None and profile.time_limit_minutes > wall:
        found.problems.append(
            f"profile time_limit_minutes={profile.time_limit_minutes} exceeds the MaxWall of {whose} ({wall:g} minutes): "
            "lower it (and watchdog_minutes) or use another account or QOS"
        )
    gpus = re.search(r"gres/gpu=(\d+)", row.get(tres_key, ""))
    if gpus and profile.gpus_per_job > int(gpus.group(1)):
        found.problems.append(
            f"profile gpus_per_job={profile.gpus_per_job} exceeds the MaxTRESPerJob of {whose} (gres/gpu={gpus.group(1)}): "
            "lower it or use another account or QOS"
        )
    cap = profile.max_concurrent_jobs
    for key, effect in (
        (
            submit_key,
            "the watcher keeps at most {n} jobs submitted at a time (fewer while your other jobs count against it; "
            "a refused submission waits and is retried), so the campaign takes longer",
        ),
        (run_key, "at most {n} of its jobs run at once and the others wait in the queue, so the campaign takes longer"),
    ):
        text = row.get(key, "").strip()
        if not text.isdigit():
            continue
        n, name = int(text), _LIMIT_NAMES[key]
        if n == 0:
            found.problems.append(f"{whose} has {name}=0: no job of it can run; use another account or QOS")
        elif n < cap:
            found.notes.append(
                f"{whose} has {name}={n}, below the profile's max_concurrent_jobs={cap}: " + effect.format(n=n)
            )


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
        ok, _, why = _ask([argv[0], "--test-only", *argv[1:]])
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
    part = _partition(profile, found)
    if part is not None:
        _gpus(profile, part["PartitionName"], found)
    _accounting(profile, part["PartitionName"] if part else profile.partition, found)
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
    if profile.scheduler != "slurm":
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


def worst_case(campaign: Campaign, curves: list[Curve]) -> str:
    """The dry run's bound: jobs at most, and those jobs each running to the time limit."""
    m, p = campaign.manifest, campaign.manifest.profile
    hours = p.time_limit_minutes * p.gpus_per_job / 60
    open_curves = [c for c in curves if c.state not in CURVE_ENDED or c.running]
    each = f"of up to {p.time_limit_minutes} min on {p.gpus_per_job} GPU(s)"
    if any(c.planned is None for c in open_curves) and m.max_batch is None:
        n = len(open_curves)
        return (
            f"worst case: unbounded without --max-batch (a curve doubles until its first CUDA OOM): each doubling "
            f"of the {n} open curve(s) is at most {n} job(s) {each}, {n * hours:.1f} GPU-hours"
        )
    jobs = 0
    for c in open_curves:
        if c.planned is not None:
            batches = list(c.planned)
        else:
            batches = [1 << k for k in range(m.max_batch.bit_length())]
        jobs += sum(1 for b in batches if b not in c.fitting)
    return (
        f"worst case: at most {jobs} job(s) {each}: {jobs * hours:.1f} GPU-hours (every job running to its time limit)"
    )
