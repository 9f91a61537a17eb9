"""No import cycles inside any workspace member, read from the source (ast), not by importing.

Every import counts, also one deferred into a function or kept for type checking only: a
deferred import hides a cycle rather than removing it, and a newcomer reading the files
top-down should meet each module after the ones it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in (ROOT / "packages").glob("*/src/*") if (p / "__init__.py").is_file())


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of one package."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's own modules that the module `name` at `path` imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def graph_of(package: Path) -> tuple[dict[str, set[str]], dict[str, Path]]:
    known = modules(package)
    return {name: imported(path, name, known) for name, path in known.items()}, known


@pytest.mark.parametrize("package", SOURCES, ids=[p.name for p in SOURCES])
def test_no_import_cycle(package):
    graph, known = graph_of(package)
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(str(known[m].relative_to(ROOT)) for m in found)


def test_the_cycle_finder_names_a_cycle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    graph, _ = graph_of(pkg)
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    (pkg / "b.py").write_text("def f():\n    pass\n")
    assert cycle(graph_of(pkg)[0]) is None


def test_every_member_is_read():
    assert {p.name for p in SOURCES} >= {
        "throughput_schema",
        "tiny_llm",
        "throughput_sweep",
        "throughput_audit",
        "throughput_report",
        "throughput_compare",
    }
