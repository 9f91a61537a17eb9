"""A command whose reader has gone (`throughput-sweep status | head -1`) ends quietly.

Python raises BrokenPipeError on the next write; every command line turns that into the
shell's SIGPIPE status, 141, instead of a traceback on the user's terminal. (argparse's
own --help output already ignores a closed pipe, so each case prints through our code.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import scripted_run, sweep, watching, write_plan
from throughput_schema.argparsing import BROKEN_PIPE_EXIT

pytestmark = pytest.mark.slow  # whole commands and a campaign

ROOT = Path(__file__).resolve().parents[1]
# -u for the campaign too: the first write of its progress meets the closed pipe at once.
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}

COMMANDS = {
    "throughput-schema export": ["throughput_schema.cli", "export"],
    "tiny-llm describe": ["tiny_llm", "describe", "--config", str(ROOT / "configs/20m.yaml")],
    "throughput-sweep status": ["throughput_sweep.cli", "status", "--output", "{campaign}"],
    "throughput-audit": ["throughput_audit.cli", "--output", "{campaign}"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_output_to_a_closed_pipe_is_not_a_traceback(name, worked_example):
    campaign = worked_example / "throughput"  # a real campaign to print
    command = [arg.format(campaign=campaign) for arg in COMMANDS[name]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, and -u writes at once: EPIPE every time
    try:
        done = subprocess.run(
            [sys.executable, "-u", "-m", *command], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == BROKEN_PIPE_EXIT, done.stderr


def test_a_campaign_whose_progress_reader_has_gone_stops_quietly_and_resumes(tmp_path):
    # `throughput-sweep run ... 2>&1 | head` : the progress lines go to stderr; once the
    # reader has gone the run ends with the SIGPIPE status (an uncaught BrokenPipeError
    # would exit 1), and a resume finishes the campaign from its files.
    plan = write_plan(tmp_path, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05)
    out = tmp_path / "campaign"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = scripted_run(out, 512, poll_max=1, progress=True)
        sweep(*run, plan=plan, output=write_end, env=UNBUFFERED, timeout=120, rc=BROKEN_PIPE_EXIT)
    finally:
        os.close(write_end)
    resumed = sweep("run", "--output", out, "--resume", *watching(1), plan=plan, timeout=120, rc=0)
    assert "20m-c512           bounded   1 2" in resumed.stdout, resumed.stdout
