"""The preflight's look at allocation budgets: is there at least one job's worth left?

Sites give an account a GPU-hour or billing budget as `GrpTRESMins` on its association (or
on a QOS), enforced with AccountingStorageEnforce=limits. slurmctld holds each limit with
what is used so far, and `scontrol show assoc_mgr` prints both as `limit(used)` in minutes
("GrpTRESMins=cpu=N(12),...,gres/gpu=600(598)"; N: no limit). The preflight reads the
user's association in the profile's account, the account's, each parent account's up to
the root, and the job's QOS, for `gres/gpu`, `cpu` and `billing` (a job's billing is its
CPUs, or what the partition's TRESBillingWeights make of its CPUs, memory and GPUs).

  * Less than one job's worth left (time_limit_minutes x the profile's TRES): a problem,
    one line naming the limit and what is used. Under AccountingStorageEnforce=safe that job
    could never start; without `safe`, Slurm would end it when the budget runs out.
  * The dry run's worst case (or, without --max-batch, the first round of jobs, saying so)
    beyond what is left: a note; the campaign stops on its budget when it runs out (budget.py).
  * What the cluster will not tell (scontrol refused, no accounting limits): a note saying
    the budget was not checked, never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from throughput_schema import ClusterProfile
from throughput_sweep.schedulers.base import Findings
from throughput_sweep.schedulers.slurm.cluster import ask
from throughput_sweep.schedulers.slurm.reasons import refusal_text

TRES = ("gres/gpu", "cpu", "billing")
_ITEM = re.compile(r"([\w/:.-]+)=(N|\d+)\((\d+)\)")
_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}


@dataclass(frozen=True)
class Budget:
    whose: str  # "the association of account budget", "QOS normal", ...
    tres: str
    limit: int  # TRES-minutes
    used: int

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def _records(text: str, head: str) -> list[tuple[dict[str, str], dict[str, tuple[int, int]]]]:
    """scontrol show assoc_mgr's records starting with `head` ("ClusterName=", "QOS="): each
    one's header fields and its GrpTRESMins limits as {tres: (limit, used)}."""
    records: list[tuple[dict[str, str], dict[str, tuple[int, int]]]] = []
    for line in text.splitlines():
        if line.startswith(head):
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            records.append((fields, {}))
        elif records and line.strip().startswith("GrpTRESMins="):
            limits = records[-1][1]
            for name, limit, used in _ITEM.findall(line.strip().split("=", 1)[1]):
                if limit != "N":
                    limits[name] = (int(limit), int(used))
        elif records:  # the record's other lines: ParentAccount, Lineage...
            for item in line.split():
                key, sep, value = item.partition("=")
                if sep:
                    records[-1][0].setdefault(key, value)
    return records


def _name(text: str) -> str:
    """'root(0)' -> 'root'."""
    return text.split("(", 1)[0]


def read_budgets(user: str, account: str, qos: str, partition: str) -> tuple[list[Budget], str]:
    """Every GrpTRESMins that binds the job, and why they could not be read ('' when they were)."""
    budgets: list[Budget] = []
    seen: set[str] = set()
    while account and account not in seen:
        seen.add(account)
        ok, out, why = ask(["scontrol", "show", "assoc_mgr", "flags=assoc", f"accounts={account}", f"users={user}"])
        if not ok:
            return [], f"scontrol show assoc_mgr: {refusal_text(why)}"
        parent = ""
        for fields, limits in _records(out, "ClusterName="):
            if fields.get("Account") != account or fields.get("Partition", "") not in ("", partition):
                continue
            who = _name(fields.get("UserName", ""))
            if who and who != user:
                continue
            whose = f"user {user}'s association with account {account}" if who else f"account {account}"
            budgets += [Budget(whose, t, *limits[t]) for t in TRES if t in limits]
            if not who:
                parent = _name(fields.get("ParentAccount", ""))
        account = parent
    if qos:
        ok, out, why = ask(["scontrol", "show", "assoc_mgr", "flags=qos", f"qos={qos}"])
        if not ok:
            return budgets, f"scontrol show assoc_mgr flags=qos: {refusal_text(why)}"
        for fields, limits in _records(out, "QOS="):
            if _name(fields.get("QOS", "")) == qos:
                budgets += [Budget(f"QOS {qos}", t, *limits[t]) for t in TRES if t in limits]
    return budgets, ""


def _mem_mb(mem: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", mem.strip().upper())
    return float(m.group(1)) * _MEM_UNITS[m.group(2) or "M"] if m else 0.0


def billing(profile: ClusterProfile, weights: str, max_tres: bool) -> float | None:
    """A job's billing TRES: its CPUs without TRESBillingWeights, else the weighted sum (or
    the largest term under PriorityFlags=MAX_TRES); None when a weight cannot be read."""
    if not weights:
        return float(profile.cpus_per_task)
    terms = []
    for item in weights.split(","):
        name, _, value = item.partition("=")
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", value.strip().upper())
        if not m:
            return None
        weight = float(m.group(1))
        key = name.strip().lower()
        if key == "cpu":
            terms.append(weight * profile.cpus_per_task)
        elif key == "mem":  # a weight per MB, or per the unit given ("0.25G": per GB)
            terms.append(weight * _mem_mb(profile.mem or "0") / _MEM_UNITS[m.group(2) or "M"])
        elif key in ("gres/gpu", "gres/gpu:"):
            terms.append(weight * profile.gpus_per_job)
    return (max(terms) if max_tres else sum(terms)) if terms else 0.0


def per_job(profile: ClusterProfile, partition_fields: dict[str, str], config: dict[str, str]) -> dict[str, float]:
    """TRES-minutes one job may use, by TRES (billing left out when its weights are unreadable)."""
    minutes = profile.time_limit_minutes
    need: dict[str, float] = {"gres/gpu": minutes * profile.gpus_per_job, "cpu": minutes * profile.cpus_per_task}
    bill = billing(
        profile, partition_fields.get("TRESBillingWeights", ""), "MAX_TRES" in config.get("PriorityFlags", "")
    )
    if bill is not None:
        need["billing"] = minutes * bill
    return need


def check_budgets(
    budgets: list[Budget], need: dict[str, float], jobs: int, what: str, profile: ClusterProfile, found: Findings
) -> None:
    """`jobs`: the worst case's jobs (`what` says which: the dry run's worst case, or a first round)."""
    for b in budgets:
        if b.tres not in need:
            continue
        one = need[b.tres]
        label = f"{b.whose}'s GrpTRESMins {b.tres}={b.limit}"
        if b.left < one:
            found.problems.append(
                f"{label} has {b.used} used, {b.left} left: less than one job needs "
                f"({profile.time_limit_minutes} min x {one / profile.time_limit_minutes:g} {b.tres} = {one:g}); "
                "ask for more, or use a profile with another account"
            )
        elif jobs * one > b.left:
            found.notes.append(
                f"{what}, {jobs} job(s) of {one:g} {b.tres}-minutes each, is more than the {b.left} left of "
                f"{label} ({b.used} used): the campaign stops on its budget if it runs out (exit status 6)"
            )
        else:
            found.checked.append(f"{label}: {b.left} left")
