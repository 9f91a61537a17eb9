"""Each workspace member's tests in that member's own environment (`--isolated-members`; see
isolated_members.py): its declared dependencies and nothing else, plus pytest."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from isolated_members import ROOT, SUMMARY_KEY, members

# tiny-llm's tests take about 8 minutes on two idle cores in one process, over 20 beside the suite.
MEMBER_LIMIT_SECONDS = 40 * 60
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


@pytest.mark.timeout(MEMBER_LIMIT_SECONDS + 60)
@pytest.mark.parametrize("member", members())
def test_the_members_tests_pass_in_its_own_environment(member, tmp_path, request, record_property):
    cmd = [
        sys.executable,
        "-m",
        "uv",  # a dependency of the workspace, as tests/test_guide.py runs it
        "run",
        "--locked",
        "--isolated",
        "--package",
        member,
        "--with",
        "pytest>=8",
        "--with",
        "pytest-timeout>=2.3",
        "--with",
        "pytest-xdist>=3.8",
        "pytest",
        "-q",
        # Two processes, a file on each at a time: the longest member would otherwise run on one
        # core while the suite's other workers are done.
        "-n",
        "2",
        "--dist",
        "loadfile",
        "-p",
        "no:cacheprovider",
        f"--basetemp={tmp_path / 'tmp'}",
    ]
    markexpr = request.config.getoption("markexpr")
    if markexpr:
        cmd += ["-m", markexpr]  # the suite's own selection, as the workspace run would apply it
    cmd.append(f"packages/{member}/tests")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}  # the member's, not the workspace's
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=MEMBER_LIMIT_SECONDS, check=False
    )
    lines = done.stdout.strip().splitlines()
    last = lines[-1].strip("= ") if lines else ""
    record_property(SUMMARY_KEY, f"packages/{member}/tests: {last or 'no summary'} (exit {done.returncode})")
    assert done.returncode == 0, f"exit {done.returncode}: " + (done.stdout + done.stderr)[-6000:]
    counts = {kind: int(n) for n, kind in COUNTS.findall(last)}
    assert counts.get("passed", 0) > 0, f"packages/{member}/tests ran no test: {last!r}"
