"""The sacct layer (throughput_slurm.sacct) and the Slurm backend's readers on text recorded from both local
Slurms, 22.05.8 and 24.11.5, by `tools/record-slurm-text.sh` (data/slurm-VERSION/, whose
commands.txt says what printed each file; data/README.md)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from throughput_slurm.environment import slurm_time
from throughput_slurm.sacct import FORMAT, Window, rows_by_job, slurm_minutes
from throughput_sweep.schedulers.slurm.reasons import never_starts
from throughput_sweep.schedulers.slurm.text import (
    SQUEUE_FORMAT,
    accounting_is_final,
    launch_failure_note,
    normalize_state,
    parse_squeue,
)

DATA = Path(__file__).parent / "data"
VERSIONS = ("22.05", "24.11")


def recording(version: str, name: str) -> str:
    return (DATA / f"slurm-{version}" / name).read_text()


def commands(version: str) -> dict[str, str]:
    """commands.txt: the Slurm's version line, then each file's command."""
    lines = recording(version, "commands.txt").splitlines()
    return {"version": lines[0], **dict(line.split(": ", 1) for line in lines[2:])}


def by_name(text: str) -> dict:
    return {row.job_name: row for row in rows_by_job(text).values()}


@pytest.mark.parametrize("version", VERSIONS)
def test_each_recording_names_its_slurm_and_asks_what_the_tool_asks(version):
    asked = commands(version)
    assert asked["version"].startswith(f"slurm-wlm {version}.")
    for name in ("sacct-lagging.txt", "sacct-states.txt", "sacct-by-name.txt"):
        assert asked[name].startswith("sacct --parsable2 --noheader -X ") and asked[name].endswith(f"--format={FORMAT}")
    assert asked["squeue.txt"].endswith(f"--format={SQUEUE_FORMAT}")


@pytest.mark.parametrize("version", VERSIONS)
def test_final_rows_of_every_end_state(version):
    rows = by_name(recording(version, "sacct-states.txt"))
    assert all(accounting_is_final(row) for row in rows.values())
    assert {name: normalize_state(row.state) for name, row in rows.items()} == {
        "tok-ok": "COMPLETED",
        "tok-fail": "FAILED",
        "tok-sleep": "CANCELLED",
        "tok-oom": "OUT_OF_MEMORY",
    }
    assert rows["tok-sleep"].state == "CANCELLED by 0"
    assert rows["tok-fail"].exit_code == "3:0" and rows["tok-oom"].exit_code == "0:125"
    assert rows["tok-oom"].req_mem == "100M" and rows["tok-ok"].req_mem == "64G"
    assert rows["tok-ok"].alloc_tres == "billing=8,cpu=8,gres/gpu=1,mem=64G,node=1"
    for name, row in rows.items():
        assert row.comment == name and row.node_list == "vm" and row.consumed_energy_raw == ""  # no energy plugin
        assert row.start.endswith("+00:00") and row.end.endswith("+00:00")
        assert slurm_minutes(row.timelimit) == 14 and 0 <= slurm_minutes(row.elapsed) < 1


@pytest.mark.parametrize("version", VERSIONS)
def test_right_after_the_jobs_ended_only_final_rows_count(version):
    if version == "22.05":
        # The database lags: every name `allocation`, no partition or time limit, ReqMem
        # `16?`, the running job still PENDING, and (that job) ConsumedEnergyRaw 0.
        lagging = rows_by_job(recording(version, "sacct-lagging.txt")).values()
        assert {row.job_name for row in lagging} == {"allocation"} and {row.partition for row in lagging} == {""}
        assert "PENDING" in {row.state for row in lagging}
        assert not any(accounting_is_final(row) for row in lagging)
        return
    # 24.11 has caught up with the ended jobs at once; the running one has no Comment yet.
    rows = by_name(recording(version, "sacct-lagging.txt"))
    running = rows.pop("tok-sleep")
    assert normalize_state(running.state) == "RUNNING" and running.end == "Unknown" and running.comment == ""
    assert not accounting_is_final(running)
    assert all(accounting_is_final(row) for row in rows.values())


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_keeps_ended_jobs_and_leaves_out_unknown_ids(version):
    queue = {entry.name: entry for entry in parse_squeue(recording(version, "squeue.txt")).values()}
    assert {name: entry.state for name, entry in queue.items()} == {
        "tok-ok": "COMPLETED",
        "tok-fail": "FAILED",
        "tok-oom": "OUT_OF_MEMORY",
        "tok-sleep": "RUNNING",
    }
    assert queue["tok-oom"].reason == "OutOfMemory" and queue["tok-fail"].reason == "NonZeroExitCode"
    assert len(commands(version)["squeue.txt"].split("--jobs=")[1].split()[0].split(",")) == 5  # one unknown id


@pytest.mark.parametrize("version", VERSIONS)
def test_a_job_over_the_partitions_time_limit_pends_and_never_reaches_a_node(version):
    (entry,) = parse_squeue(recording(version, "squeue-pending.txt")).values()
    assert entry.state == "PENDING" and entry.reason == "PartitionTimeLimit" and never_starts(entry.reason)
    note = launch_failure_note(recording(version, "scontrol-cancelled-pending.txt"))
    assert note == "Slurm gives the reason PartitionTimeLimit; the job never reached a node"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_lookup_by_name_in_a_window_ending_now(version):
    rows = by_name(recording(version, "sacct-by-name.txt"))
    assert set(rows) == {"tok-ok", "tok-fail", "tok-oom", "tok-timeout"}
    late = rows["tok-timeout"]
    assert normalize_state(late.state) == "TIMEOUT" and late.exit_code == "0:0" and accounting_is_final(late)
    assert slurm_minutes(late.timelimit) == 1 and 1 < slurm_minutes(late.elapsed) < 3
    # The window's arguments in the form the recorded query gave sacct.
    start = re.search(r"--starttime=(\S+)", commands(version)["sacct-by-name.txt"])
    assert start is not None
    when = datetime.fromisoformat(start.group(1) + "+00:00")
    assert slurm_time(when) == start.group(1)
    assert Window(when, when).sacct_args(until_now=True) == [start.group(0), "--endtime=now"]
