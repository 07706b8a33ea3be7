"""analysis/compute.py: ``compute_all``'s stats are JSON scalars; the registry is not imported by
what it registers (no import cycle in analysis/)."""

from __future__ import annotations

import ast
from pathlib import Path


def test_stats_are_json_scalars(paper_analysis):
    import json

    json.dumps(paper_analysis.stats, allow_nan=False)  # raises on NaN / numpy types


def _runtime_imports(path: Path, package: str, modules: set[str], typing: bool = False) -> set[str]:
    """The modules of ``package`` that ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks
    are not run, unless ``typing``), at module level or inside a function."""
    tree = ast.parse(path.read_text())
    typing_only = set() if typing else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for n in ast.walk(stmt)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n in modules}


def import_cycles(parent: Path, package: str, typing: bool = False) -> list[list[str]]:
    """The import cycles among the modules of ``parent/package`` (strongly connected components of
    more than one module)."""
    files = {(package if p.stem == "__init__" else f"{package}.{p.stem}"): p
             for p in (parent / package).glob("*.py")}
    graph = {m: _runtime_imports(p, package, set(files), typing) - {m} for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return out


def test_analysis_has_no_import_cycle():
    """The section registry (compute.py) imports the sections; nothing they import may import it back
    (claims.py once did, through ``all_claims``: a circle of the registry and its clients)."""
    assert import_cycles(Path(__file__).resolve().parents[1], "analysis") == []


def test_analysis_imports_run_one_way_even_for_type_checking():
    """No two modules of analysis/ import each other, not even for type annotations only (claims.py
    and section.py once did: section.py imports the claims; they read an ``Analysis`` protocol)."""
    assert import_cycles(Path(__file__).resolve().parents[1], "analysis", typing=True) == []


def test_import_cycles_finds_a_circle(tmp_path):
    pkg = tmp_path / "circle"
    pkg.mkdir()
    (pkg / "a.py").write_text("from circle.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from circle import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circle import a\n")
    assert import_cycles(tmp_path, "circle") == [["circle.a", "circle.b"]]
