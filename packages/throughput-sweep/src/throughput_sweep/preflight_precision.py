"""The preflight's word on an FP8 campaign's compute environment: does the profile's Python
import torchao's float8 training?

Asked only where the login node can run that Python (a shared filesystem, the same
architecture). A Python that runs and cannot import torchao is a problem: the same
environment would refuse every point on its node. One that does not run here (a compute
node's other architecture) leaves a note, never a pass: the node still says it, as a
`refused` point naming the cause.
"""

from __future__ import annotations

import subprocess

from throughput_schema import ClusterProfile
from throughput_schema.precision import is_fp8
from throughput_sweep.schedulers.base import Findings

PROBE = "import torchao.float8"
TIMEOUT = 120.0


def check_precision(profile: ClusterProfile, precision: str, found: Findings) -> None:
    if not is_fp8(precision):
        return
    try:
        done = subprocess.run(
            [profile.python, "-c", PROBE], capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        found.notes.append(
            f"torchao for --precision {precision} was not checked: {profile.python} did not run here ({exc})"
        )
        return
    if done.returncode == 0:
        found.checked.append(f"{profile.python} imports torchao for {precision}")
        return
    said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    if "ModuleNotFoundError" in said or "ImportError" in said:
        found.problems.append(
            f"--precision {precision}: the profile's python {profile.python} cannot import torchao ({said}); "
            "install tiny-llm's fp8 extra there (uv sync --locked --all-packages --extra fp8), or run --precision bf16"
        )
    else:
        found.notes.append(f"torchao for --precision {precision} was not checked: {profile.python} said {said}")
