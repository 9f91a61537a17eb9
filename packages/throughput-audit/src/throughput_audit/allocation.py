"""A job's allocation as sacct reports it, against the campaign's profile.

Sites legitimately give more than was asked, or report it otherwise; the audit accepts:
- more CPUs than asked (a job_submit plugin or a whole-core layout rounds them up);
- memory in any unit ("65536M" for "64G"), per CPU ("8Gc", older Slurm's ReqMem) or
  per node ("64Gn"), read from AllocTRES or, where AllocTRES has none, from ReqMem;
  more memory than asked (per-CPU defaults rounded up);
- no memory at all where the profile asks for none (`mem: ""`: the site's default);
- a longer time limit than asked (UNLIMITED included).
It fails fewer CPUs, fewer or more GPUs, less memory, a shorter time limit, and another
account or partition. docs/reliability.md ("Site allocations") says the same.
"""

from __future__ import annotations

import re

from throughput_schema import ClusterProfile
from throughput_slurm.sacct import AccountingRow, parse_tres, slurm_duration, slurm_minutes, tres_gpus

_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}
_MEM = re.compile(r"\s*([0-9.]+)\s*([KMGTP]?)([nc]?)\s*", re.IGNORECASE)


def mem_mib(text: str) -> float | None:
    """'64G' / '65536M' / '64Gn' (per node) -> MiB; None if unreadable. A per-CPU
    figure ('8Gc') is read as it stands: `allocated_mem` multiplies it out."""
    m = _MEM.fullmatch(text or "")
    if not m:
        return None
    return float(m.group(1)) * _MEM_UNITS[(m.group(2) or "M").upper()]


def allocated_mem(row: AccountingRow, tres: dict[str, str]) -> tuple[float | None, str]:
    """The job's memory in MiB and the text it was read from: AllocTRES's mem, else ReqMem
    (per CPU times the CPUs, per node times the nodes)."""
    if tres.get("mem"):
        return mem_mib(tres["mem"]), tres["mem"]
    req = (row.req_mem or "").strip()
    m = _MEM.fullmatch(req)
    if not req or not m:
        return None, req
    each = mem_mib(req)
    per = m.group(3).lower()
    times = tres.get("cpu") if per == "c" else tres.get("node", "1") if per == "n" else "1"
    if each is None or times is None or not times.isdigit():
        return None, req
    return each * int(times), f"ReqMem {req}" + (f" x {times} CPUs" if per == "c" else "")


def allocation_problems(row: AccountingRow, profile: ClusterProfile) -> list[tuple[str, str, object]]:
    """(what, what the profile requires as text, actual) for each way the row falls short
    of, or differs from, the profile."""
    problems: list[tuple[str, str, object]] = []
    tres = parse_tres(row.alloc_tres)
    gpus = tres_gpus(tres)
    if gpus != profile.gpus_per_job:
        problems.append(("gres/gpu", str(profile.gpus_per_job), gpus))
    cpus = tres.get("cpu")
    if cpus is None or not cpus.isdigit() or int(cpus) < profile.cpus_per_task:
        problems.append(("cpu", f"at least {profile.cpus_per_task}", cpus))
    if profile.mem.strip():
        want = mem_mib(profile.mem)
        got, text = allocated_mem(row, tres)
        if want is None or got is None or got < want - 0.5:
            problems.append(("mem", f"at least {profile.mem}", text or None))
    limit_text = (row.timelimit or "").strip()
    try:
        limit = slurm_minutes(limit_text)
    except ValueError:
        limit = None  # unreadable: falls short of any limit the profile asks
    if limit_text != "UNLIMITED" and (limit is None or limit < profile.time_limit_minutes - 1e-9):
        problems.append(("timelimit", f"at least {slurm_duration(profile.time_limit_minutes * 60)}", row.timelimit))
    if profile.account and row.account != profile.account:
        problems.append(("account", repr(profile.account), row.account))
    if profile.partition and row.partition != profile.partition:
        problems.append(("partition", repr(profile.partition), row.partition))
    return problems
