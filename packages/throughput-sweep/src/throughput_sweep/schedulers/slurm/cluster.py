"""The half of Slurm's preflight (preflight.py) that reads the cluster's configuration: does the
profile's partition exist and admit its time, has a node of it the GPUs, and do the user's
account and QOS admit the job (or only slow the campaign down)? Each answer is a problem, a
note or a confirmation in `Findings`.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from dataclasses import dataclass

from throughput_schema import ClusterProfile
from throughput_slurm.environment import query_environment
from throughput_slurm.sacct import slurm_minutes
from throughput_sweep.schedulers.base import Findings
from throughput_sweep.schedulers.slurm.reasons import refusal_text

TIMEOUT = 60.0


def ask(argv: list[str]) -> tuple[bool, str, str]:
    """(answered, stdout, stderr or what went wrong); the environment is the watcher's.
    A note or problem quotes it on one line (`refusal_text`)."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT, env=query_environment(os.environ), check=False
        )
    except subprocess.TimeoutExpired:
        return False, "", f"{argv[0]} did not answer within {TIMEOUT:.0f} s"
    except OSError as exc:
        return False, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
    return proc.returncode == 0, proc.stdout, proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def _minutes(text: str) -> str:
    value = _limit_minutes(text)
    return f"{value:g} minutes" if value is not None else text


def _limit_minutes(text: str) -> float | None:
    """A time limit in minutes; None for no limit, and for text that is no duration: a limit
    the preflight cannot read is left to sbatch, which refuses what exceeds it."""
    try:
        return slurm_minutes(text)
    except ValueError:
        return None


# ------------------------------------------------------------------ partition


def check_partition(profile: ClusterProfile, found: Findings) -> dict[str, str] | None:
    ok, out, why = ask(["scontrol", "--all", "show", "partition", "-o"])
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
    limit = _limit_minutes(part.get("MaxTime", "UNLIMITED"))
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


def check_gpus(profile: ClusterProfile, partition: str, found: Findings) -> None:
    ok, out, why = ask(["sinfo", "--noheader", "--Node", f"--partition={partition}", "--format=%N|%G"])
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
    ok, out, _ = ask(["scontrol", "show", "config"])
    found = {}
    for line in out.splitlines() if ok else ():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


@dataclass(frozen=True)
class Association:
    """Whose limits bind the job, where the cluster enforces them (allocation_budget.py reads on)."""

    user: str
    account: str
    qos: str
    config: dict[str, str]


def check_accounting(profile: ClusterProfile, partition: str, found: Findings) -> Association | None:
    config = _config()
    enforce = config.get("AccountingStorageEnforce", "")
    cluster = config.get("ClusterName", "")
    if "associations" not in enforce and "limits" not in enforce and "safe" not in enforce:
        found.notes.append("the account and QOS limits were not checked (this cluster does not enforce associations)")
        return None
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a container without a passwd entry for us
        found.notes.append(f"the account and QOS limits were not checked (no user name for uid {os.getuid()})")
        return None
    where = ["where", f"user={user}"] + ([f"cluster={cluster}"] if cluster else [])
    ok, out, why = ask(["sacctmgr", "--noheader", "--parsable2", "show", "assoc", *where, f"format={','.join(_ASSOC)}"])
    if not ok:
        found.notes.append(f"the account and QOS limits were not checked (sacctmgr: {refusal_text(why)})")
        return None
    assocs = _rows(out, _ASSOC)
    account = profile.account
    if not account:
        ok, out, why = ask(["sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=DefaultAccount"])
        account = out.strip().splitlines()[0].strip() if ok and out.strip() else ""
        if not account:
            found.notes.append(
                f"the account was not checked (no default account of user {user} found: {refusal_text(why)})"
            )
            return None
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
        return None
    qos = _qos_flag(list(profile.extra_submit_args)) or row["DefaultQOS"]
    allowed = [q for q in row["QOS"].split(",") if q]
    if not qos:
        # Slurm's choice without a default: the only QOS the association allows, else normal.
        qos = allowed[0] if len(allowed) == 1 else "normal"
    found.checked.append(f"account {account}, QOS {qos}")
    if "limits" not in enforce and "safe" not in enforce:
        return None
    association = Association(user, account, qos, config)
    _limits(
        profile, f"the association of account {account}", row, ("MaxWall", "MaxTRES", "MaxSubmit", "MaxJobs"), found
    )
    ok, out, why = ask(
        ["sacctmgr", "--noheader", "--parsable2", "show", "qos", "where", f"name={qos}", f"format={','.join(_QOS)}"]
    )
    rows = _rows(out, _QOS) if ok else []
    if not rows:
        found.notes.append(
            f"the limits of QOS {qos} were not checked (sacctmgr: {refusal_text(why) if not ok else 'no such QOS'})"
        )
        return association
    _limits(profile, f"QOS {qos}", rows[0], ("MaxWall", "MaxTRES", "MaxSubmitPU", "MaxJobsPU"), found)
    return association


_LIMIT_NAMES = {
    "MaxSubmitPU": "MaxSubmitJobsPerUser",
    "MaxJobsPU": "MaxJobsPerUser",
    "MaxSubmit": "MaxSubmitJobs",
    "MaxJobs": "MaxJobs",
}


def _limits(profile: ClusterProfile, whose: str, row: dict[str, str], keys: tuple[str, ...], found: Findings) -> None:
    wall_key, tres_key, submit_key, run_key = keys
    wall = _limit_minutes(row.get(wall_key, ""))
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
