"""Which package may import which, where Ray may be imported, and no import circle anywhere.

Not named after one module: it reads the import statements of every module of ``model``,
``metrics``, ``interventions``, ``analysis``, ``sweep`` (each subpackage on its own) and ``bench``,
as the code runs them: at module level or inside a function, not under ``if TYPE_CHECKING:``.
docs/architecture.md draws the same rules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "metrics", "interventions", "analysis", "sweep", "bench")

#: sweep/'s own top-level modules: the vocabulary every job shares (the flag language, the presets and
#: their --strengths), and the commands (with the demo's estimate of its time), which sit above all
SHARED = {"sweep", "sweep.cli", "sweep.presets", "sweep.strengths"}
COMMANDS = {f"sweep.{m}" for m in ("baseline", "interventions", "demo", "replay", "browse", "tiny_series", "estimate")}
#: the most modules sweep/ keeps at its top level (every job is a subpackage)
TOP_LEVEL_MOST = 14

#: unit -> the units it may import (a unit is a package, a subpackage of sweep/, or one of the two
#: groups of sweep/'s top-level modules: ``sweep`` (shared) and ``sweep (commands)``)
MAY_IMPORT: dict[str, set[str]] = {
    "interventions": set(),
    "metrics": set(),
    "model": {"interventions", "metrics"},  # the trainer probes each epoch and calls the conditions' hooks
    "analysis": {"model", "metrics", "interventions"},
    # cli names the store's errors as the user's; a preset keys its runs by the store's run_id
    "sweep": {"model", "interventions", "sweep.store"},
    "sweep.store": {"metrics", "sweep", "sweep.trackers"},  # python -m sweep.store export: to the trackers
    "sweep.trackers": {"metrics", "interventions", "sweep", "sweep.store", "sweep.trial"},  # a trial's runs
    "sweep.synthetic": {"analysis", "model", "interventions", "sweep", "sweep.store"},
    "sweep.report": {"analysis", "model", "sweep", "sweep.store", "sweep.trackers"},
    "sweep.placement": {"model", "interventions", "sweep"},
    "sweep.hooks": {"sweep", "sweep.placement"},
    "sweep.trial": {"model", "interventions", "sweep", "sweep.store", "sweep.hooks"},
    "sweep.driver": {"model", "interventions", "sweep", "sweep.store", "sweep.trackers", "sweep.placement",
                     "sweep.trial", "sweep.hooks"},
    "sweep.extension": {"model", "metrics", "sweep", "sweep.store", "sweep.placement"},
    "sweep.sequential": {"analysis", "model", "interventions", "sweep", "sweep.store", "sweep.synthetic",
                         "sweep.placement", "sweep.trial", "sweep.driver"},
}
MAY_IMPORT["sweep (commands)"] = set(MAY_IMPORT)
MAY_IMPORT["bench"] = set(MAY_IMPORT)
#: the units whose modules may import Ray: the jobs that run on it, their commands and the benchmarks
#: circles through ``if TYPE_CHECKING:`` imports alone (nothing runs them; a reader still follows them
#: both ways). The one left: extension/record.py annotates with revision_probe's ProbeSettings, whose
#: module builds record's ProbeRecord; sweep/extension/ was not reorganised with the rest of sweep/.
TYPE_ONLY_CIRCLES = [["sweep.extension.record", "sweep.extension.revision_probe"]]
RAY = {"sweep.placement", "sweep.hooks", "sweep.trial", "sweep.driver", "sweep.sequential", "sweep.extension",
       "sweep.trackers", "sweep (commands)", "bench"}


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(path: Path, name: str, typing: bool = False) -> set[str]:
    """Every module ``path`` (module ``name``) imports when it runs, as written (``from a import b``:
    ``a`` and ``a.b``); relative imports resolved. ``if TYPE_CHECKING:`` blocks are not run (they
    count with ``typing``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = set() if typing else {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return names


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (itself left out; ``typing``: for annotations too)."""
    mods = modules(root, packages)
    return {m: {n for n in imported(p, m, typing) if n in mods} - {m} for m, p in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
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


def unit(module: str, root: Path = ROOT) -> str:
    """The unit a module belongs to (``MAY_IMPORT``'s keys)."""
    parts = module.split(".")
    if parts[0] != "sweep":
        return parts[0]
    if len(parts) > 1 and (root / "sweep" / parts[1]).is_dir():
        return f"sweep.{parts[1]}"
    if module in SHARED:
        return "sweep"
    if module in COMMANDS:
        return "sweep (commands)"
    raise AssertionError(f"{module}: a module at sweep/'s top level is shared (SHARED) or a command "
                         "(COMMANDS); a job's module goes into its subpackage")


def forbidden(graph: dict[str, set[str]], rules: dict[str, set[str]], root: Path = ROOT) -> list[str]:
    """``a -> b (unit a -> unit b)`` for every import across units that ``rules`` does not allow."""
    return [f"{a} -> {b} ({unit(a, root)} -> {unit(b, root)})" for a in sorted(graph) for b in sorted(graph[a])
            if unit(b, root) != unit(a, root) and unit(b, root) not in rules[unit(a, root)]]


def imports_ray(path: Path) -> bool:
    return any(n == "ray" or n.startswith("ray.") for n in imported(path, ""))


# --- the checks can fail ----------------------------------------------------------------------


def test_a_circle_is_found_whether_imported_at_the_top_or_in_a_function(tmp_path):
    pkg = tmp_path / "circle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circle.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from circle import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circle import a\n")
    (pkg / "d.py").write_text("from . import a\nfrom .c import y\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circle.f import F\n")
    (pkg / "f.py").write_text("from circle import e\n")
    graph = import_graph(tmp_path, ["circle"])
    assert graph["circle.d"] == {"circle", "circle.a", "circle.c"} and graph["circle.c"] == set()
    assert circles(graph) == [["circle.a", "circle.b"]]
    assert circles(import_graph(tmp_path, ["circle"], typing=True)) == [["circle.a", "circle.b"], ["circle.e", "circle.f"]]


def test_an_import_the_rules_do_not_allow_is_named(tmp_path):
    for pkg, text in (("model", "import metrics.probe\n"), ("metrics", "def f():\n    from model import gpt\n")):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
        (tmp_path / pkg / "x.py").write_text(text)
    (tmp_path / "metrics" / "probe.py").write_text("import ray\n")
    (tmp_path / "model" / "gpt.py").write_text("")
    graph = import_graph(tmp_path, ["model", "metrics"])
    assert forbidden(graph, {"model": {"metrics"}, "metrics": set()}, tmp_path) == [
        "metrics.x -> model (metrics -> model)", "metrics.x -> model.gpt (metrics -> model)"]
    assert imports_ray(tmp_path / "metrics" / "probe.py") and not imports_ray(tmp_path / "model" / "x.py")


# --- the project ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_import_circle_anywhere(graph):
    assert circles(graph) == []


def test_no_circle_even_through_type_annotations_but_the_one_known():
    assert circles(import_graph(typing=True)) == TYPE_ONLY_CIRCLES


def test_each_package_imports_only_what_the_rules_allow(graph):
    assert {unit(m) for m in graph} == set(MAY_IMPORT), "a unit without rules, or rules for none"
    bad = forbidden(graph, MAY_IMPORT)
    assert not bad, "imports across packages that MAY_IMPORT does not allow:\n" + "\n".join(bad)


def test_ray_is_imported_only_by_the_jobs_that_run_on_it(graph):
    bad = [m for m, path in modules(ROOT, PACKAGES).items() if imports_ray(path) and unit(m) not in RAY]
    assert not bad, f"Ray imported outside {sorted(RAY)}: {bad}"


def test_sweep_keeps_few_modules_at_its_top_level():
    top = sorted(p.name for p in (ROOT / "sweep").glob("*.py"))
    assert len(top) <= TOP_LEVEL_MOST, top
