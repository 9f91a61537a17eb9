"""`throughput-slurm`: sacct's text read as the tool reads it, and the environment it strips."""

from __future__ import annotations

import json

from throughput_slurm.cli import main
from throughput_slurm.sacct import FIELDS, FORMAT

ROW = "|".join(
    {
        "JobID": "4242",
        "JobName": "tp-20m-c512-b8",
        "State": "CANCELLED by 0",
        "ExitCode": "0:15",
        "Partition": "gpu",
        "Account": "lab",
        "Timelimit": "00:30:00",
        "AllocTRES": "billing=8,cpu=8,gres/gpu:h100=1,mem=64G,node=1",
        "ReqMem": "64G",
        "Start": "2026-12-03T06:29:02",
        "End": "2026-12-03T06:31:04",
        "Elapsed": "00:02:02",
        "NodeList": "gpu07",
        "ConsumedEnergyRaw": "0",
        "Comment": "a|comment",
    }[name]
    for name, _ in FIELDS
)


def test_format_is_the_tools_own(capsys):
    assert main(["format"]) == 0
    assert capsys.readouterr().out.strip() == FORMAT


def test_read_gives_each_row_in_the_projects_words(tmp_path, capsys):
    text = tmp_path / "sacct.txt"
    text.write_text(ROW + "\n" + ROW.replace("4242|", "4242.batch|", 1) + "\n")
    assert main(["read", str(text)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2  # the step row too: `read` shows what sacct printed, row by row
    job = lines[0]
    assert job["state"] == "cancelled" and job["exit_code"] == 0 and job["signal"] == 15
    assert job["start"] == "2026-12-03T06:29:02+00:00" and job["elapsed_seconds"] == 122.0
    assert job["time_limit_seconds"] == 1800.0
    assert job["allocation"] == {"nodes": "gpu07", "gpus": 1, "cpus": 8, "memory_bytes": 64 << 30}
    assert job["energy_joules"] is None  # "0": the site measures none, never zero joules
    # The row kept as one line of sacct's text, its times with the offset they were read with.
    assert job["raw"] == ROW.replace("T06:29:02|", "T06:29:02+00:00|").replace("T06:31:04|", "T06:31:04+00:00|")


def test_read_of_no_row_says_how_to_ask_sacct(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    assert main(["read", str(empty)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no sacct row" in err[0] and "--format=$(throughput-slurm format)" in err[0]


def test_read_of_a_missing_file_is_one_line(tmp_path, capsys):
    assert main(["read", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read" in err[0]


def test_environment_names_what_is_stripped_never_values(monkeypatch, capsys):
    monkeypatch.setenv("SBATCH_QOS", "secret-qos")
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    assert main(["environment"]) == 0
    out = capsys.readouterr().out
    assert "SBATCH_QOS" in out and "SLURM_JOB_ID" in out
    assert "SLURM_CONF" not in out and "secret-qos" not in out
