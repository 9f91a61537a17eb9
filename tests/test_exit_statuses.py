"""The guide's exit statuses (docs/guide.md) are the code's: the sweep's table
(throughput_sweep.exit_statuses) and the worker's outcomes (throughput_schema.EXIT_CODES)."""

from __future__ import annotations

import re

from campaign_helpers import ROOT
from throughput_schema import EXIT_CODES
from throughput_sweep.exit_statuses import EXIT_STATUSES, MEANINGS

GUIDE = (ROOT / "docs/guide.md").read_text()
# The worker's sentence names outcomes in words.
WORKER_WORDS = {
    "ok": "ok",
    "crashed": "crashed",
    "bad input": "usage",
    "CUDA OOM": "cuda_oom",
    "compile error": "compile_error",
    "non-finite state": "nonfinite",
    "timeout": "timeout",
    "host memory": "host_oom",
    "result not written": "storage_full",
    "refused": "refused",
}


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_guides_table_gives_the_sweeps_statuses_and_no_other():
    lines = GUIDE.split("## Exit statuses\n", 1)[1].splitlines()
    header = next(line for line in lines if line.startswith("| command |"))
    run = next(line for line in lines if line.startswith("| `throughput-sweep run` |"))
    codes = [int(cell) for cell in _cells(header)[1:]]
    documented = {code for code, cell in zip(codes, _cells(run)[1:]) if cell}
    assert documented == {code for code, _ in MEANINGS}


def test_the_help_names_every_status_once():
    named = [int(code) for code in re.findall(r"(?:: |; )(\d+) ", EXIT_STATUSES)]
    assert named == [code for code, _ in MEANINGS] and len(set(named)) == len(named)


def test_the_guides_worker_statuses_are_its_outcomes():
    sentence = GUIDE.split("The worker (`python -m tiny_llm benchmark-throughput-worker`) exits", 1)[1]
    sentence = " ".join(sentence.split("Scheduler states", 1)[0].split())
    said = {
        WORKER_WORDS[words]: int(code) for code, words in re.findall(r"(\d+) ([A-Za-z -]+?)(?=[,.]| and )", sentence)
    }
    assert len(said) == len(WORKER_WORDS)
    assert said == {kind: EXIT_CODES[kind] for kind in said}


def test_the_workers_docstring_table_is_its_outcomes():
    import tiny_llm.worker

    rows = re.findall(r"^\| `?\(?(\w+)\)?`? +\| (\d+) +\|", tiny_llm.worker.__doc__ or "", flags=re.MULTILINE)
    assert len(rows) == 8
    assert {kind: int(code) for kind, code in rows} == {kind: EXIT_CODES[kind] for kind, _ in rows}
