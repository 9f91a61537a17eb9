"""The node subpackage imports only what the compute node's environment is sure to have."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import throughput_sweep.node

NODE = Path(throughput_sweep.node.__file__).parent
# The schema and its one dependency travel with every frozen campaign; anything else
# (anyio, matplotlib, yaml, torch, the controller's modules) may be missing on the node.
ALLOWED = set(sys.stdlib_module_names) | {"throughput_schema", "msgspec"}


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def test_node_modules_import_only_the_standard_library_and_the_schema():
    files = sorted(NODE.rglob("*.py"))
    assert len(files) >= 3
    bad = []
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ALLOWED or name == "throughput_sweep.node" or name.startswith("throughput_sweep.node."):
                continue
            bad.append(f"{path.relative_to(NODE)}: {name}")
    assert not bad, bad


def test_the_check_sees_a_forbidden_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import os\nfrom throughput_sweep.campaign import Campaign\nimport anyio\n")
    assert _imports(sample) == ["os", "throughput_sweep.campaign", "anyio"]
