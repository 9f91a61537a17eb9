"""Every command of docs/guide.md, run as the guide writes it, in the guide's order.

The commands come from the guide's `bash` blocks (continued lines joined, `# ...` dropped),
run from one folder of their own, sharing the `export`s of the blocks before them as a
shell would. What cannot run here is run as far as it can:
- a campaign `run` under a Slurm profile gets `--dry-run` (the plan and the job script,
  nothing submitted);
- a compute node's worker command (`.venv-aarch64/...`) is parsed by the worker's own
  parser and its recipe resolved, without a GPU;
- `uv sync` gets `--dry-run`, in the repository.
Everything else runs for real: the workstation walk-through measures the tiny preset on
the local scheduler, audits it and writes the report. A command must succeed, unless a
`runs/...` folder it names is not here (a cluster's campaign): then it must be refused in
one line naming that folder. So a renamed command, a dropped flag or a changed exit status
fails here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs/guide.md"
PROFILE_ENV = "THROUGHPUT_SWEEP_PROFILE"
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
# Each console script as a process this checkout can start without its environment's bin/.
PROGRAMS = {
    "throughput-sweep": [str(ROOT / "scripts/throughput_sweep.py")],
    "throughput-audit": [str(ROOT / "scripts/throughput_audit.py")],
    "throughput-report": [str(ROOT / "scripts/throughput_report.py")],
    "throughput-compare": ["-m", "throughput_compare.cli"],
    "throughput-schema": ["-m", "throughput_schema.cli"],
}
PYTHONS = {"python", "python3", ".venv-x86_64/bin/python", ".venv-aarch64/bin/python"}
COMPUTE_NODE = ".venv-aarch64/bin/python"


@dataclass(frozen=True)
class Command:
    line: str
    env: dict[str, str]  # the exports before it and its own VAR=value prefix
    argv: list[str]


def guide_commands(text: str) -> list[Command]:
    exported: dict[str, str] = {}
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "export":
                exported.update(w.split("=", 1) for w in words[1:])
                continue
            own = {}
            while words and ASSIGNMENT.match(words[0]):
                name, value = words.pop(0).split("=", 1)
                own[name] = value
            commands.append(Command(line.strip(), {**exported, **own}, words))
    return commands


def test_the_guide_has_a_command_of_every_kind():
    argvs = [" ".join(c.argv) for c in guide_commands(GUIDE.read_text())]
    for needed in (
        "throughput_sweep.py run",
        "--resume",
        "--retry-failed",
        "status",
        "collect",
        "close-curve",
        "reconcile",
        "--optimizer-timing-from",
        "--parallel-optimizer-points",
        "throughput_report.py",
        "throughput_audit.py",
        "throughput-compare",
        "--spot-check-from",
        "benchmark-throughput-worker",
        "uv sync --locked",
        "recipe-from-hf",
    ):
        assert any(needed in a for a in argvs), f"docs/guide.md has no command with {needed!r}"


def _worker_parses(command: Command) -> str | None:
    """A compute node's worker command, parsed and resolved as the worker would; None if fine."""
    from tiny_llm.cli import build_parser
    from tiny_llm.worker_cli import resolve

    args = command.argv[1:]
    assert args[:2] == ["-m", "tiny_llm"], command.line
    try:
        parsed = build_parser().parse_args(args[2:])
    except SystemExit:
        return "the worker's parser refused it"
    parsed.config = ROOT / parsed.config
    resolve(parsed)  # raises on an unknown --set key or a bad value
    return None


def _argv(command: Command) -> list[str]:
    words = list(command.argv)
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    if words[0] in PROGRAMS:
        return [sys.executable, *PROGRAMS[words[0]], *words[1:]]
    assert words[0] in PYTHONS, f"docs/guide.md: a command this test cannot start: {command.line}"
    rest = [str(ROOT / w) if w.startswith("scripts/") else w for w in words[1:]]
    return [sys.executable, *rest]


def _needs_a_cluster(command: Command, argv: list[str]) -> bool:
    return command.env.get(PROFILE_ENV, "local") != "local" and "run" in argv[:3] and "--dry-run" not in argv


# The walk-through's optimizer follow-up audits the instrumented worker's optimizer time over
# its baseline's update time, measured one after the other in 1 s windows: work beside it on the
# same cores can land on one and not the other and push the ratio past 100%.
@pytest.mark.alone
@pytest.mark.slow
def test_every_command_of_the_guide_runs(tmp_path):
    commands = guide_commands(GUIDE.read_text())
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    # "Your own model": the Hugging Face config.json files the guide says you saved under models/.
    (tmp_path / "models").symlink_to(ROOT / "packages/throughput-schema/tests/hf_configs")
    base = {k: v for k, v in os.environ.items() if k != PROFILE_ENV}
    failures, ran = [], 0
    for command in commands:
        env = {**base, **command.env}
        if command.argv[:2] == ["uv", "sync"]:
            uv = [sys.executable, "-m", "uv"]
            proc = subprocess.run(
                [*uv, *command.argv[1:], "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
            )
            if proc.returncode != 0:
                failures.append(f"{command.line}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
            ran += 1
            continue
        if command.argv[0] == COMPUTE_NODE:
            problem = _worker_parses(command)
            if problem:
                failures.append(f"{command.line}: {problem}")
            ran += 1
            continue
        argv = _argv(command)
        if _needs_a_cluster(command, argv):
            argv.append("--dry-run")
        if command.env.get(PROFILE_ENV, "local") != "local":
            # Away from the guide's cluster: a Slurm here (sbatch on PATH) is another cluster,
            # whose preflight would rightly refuse the gh200 profile's account and partition.
            env["PATH"] = os.pathsep.join(
                d for d in env.get("PATH", "").split(os.pathsep) if not (Path(d) / "sbatch").exists()
            )
        absent = [w for w in command.argv if w.startswith("runs/") and not (tmp_path / w).exists()]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        ran += 1
        if proc.returncode == 0:
            continue
        lines = proc.stderr.strip().splitlines()
        refused_for_absence = (
            proc.returncode == 2 and len(lines) == 1 and "usage:" not in lines[0] and any(a in lines[0] for a in absent)
        )
        if not refused_for_absence:
            failures.append(f"{command.line}: exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert ran == len(commands) and ran >= 20
    # The walk-through really ran: its campaigns are audited and its report is written.
    for campaign in ("runs/tiny", "runs/tiny-optimizer"):
        assert (tmp_path / campaign / "audit.json").is_file()
    assert (tmp_path / "runs/tiny-report/report.pdf").is_file()
    assert (tmp_path / "runs/tiny-point.json").is_file()
    # The dry runs wrote nothing.
    assert not (tmp_path / "runs/gh200-throughput").exists() and not (tmp_path / "runs/tiny-spot").exists()
