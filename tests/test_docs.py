"""docs/SPEC.md, the definitions document: every "SPEC §n" the code cites is one of its headings,
README.md links it, and it names every store column, condition (with its strengths' defaults),
init regime and preset the code defines. And the paths the documentation names: every repository
path in README.md, docs/, bench/RESULTS.md, docstrings and comments exists, and
docs/architecture.md's layout table lists exactly the modules of the tree.

Not named after one module: it checks a document against the whole repository.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "SPEC.md"
README = ROOT / "README.md"

#: Folders never scanned for references (build outputs, environments, run data).
SKIP_DIRS = {".git", ".venv", ".lock-venv", ".floors-venv", "runs", "data", "__pycache__", ".pytest_cache",
             ".ruff_cache", ".cluster", "node_modules", "docs"}

_NUM = r"\d+(?:\.\d+)?"
#: "SPEC §4.1", and the sections listed after it: "SPEC §3, §4.1", "SPEC §5 and §6", "SPEC §6/§7".
_REF = re.compile(rf"SPEC §({_NUM}(?:(?:,\s*|\s+and\s+|\s+or\s+|\s*/\s*)§{_NUM})*)")
#: "## 4. Metrics", "### 4.1 The layer probe", "## 5.1 Packed trials".
_HEADING = re.compile(rf"^#{{2,3}}\s+({_NUM})\.?\s+\S", re.MULTILINE)


def spec_refs(text: str) -> list[str]:
    """Every section number cited as "SPEC §n" in ``text``, list continuations included."""
    return [n for m in _REF.finditer(text) for n in re.findall(_NUM, m.group(1))]


def spec_headings(markdown: str) -> list[str]:
    """The section numbers of the document's numbered ``##`` / ``###`` headings, in order."""
    return _HEADING.findall(markdown)


def unresolved(refs: list[tuple[str, str]], headings: set[str]) -> list[str]:
    """``where: SPEC §n`` for each (where, n) whose n is not a heading."""
    return [f"{where}: SPEC §{n}" for where, n in refs if n not in headings]


def _files(root: Path):
    """Every file under ``root``, not descending into SKIP_DIRS or a top-level ``*.egg-info``
    (what ``root.rglob("*")`` yields less what the filter below drops: .venv alone is ~30k files)."""
    for folder, dirs, files in os.walk(root):
        top = Path(folder) == root
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not (top and d.endswith(".egg-info"))]
        yield from (Path(folder) / f for f in files)


def repository_refs(root: Path = ROOT) -> list[tuple[str, str]]:
    """(file:line, section) of every "SPEC §n" in the repository's Python and Markdown files."""
    out = []
    for path in sorted(_files(root)):
        rel = path.relative_to(root)
        if path.suffix not in (".py", ".md") or SKIP_DIRS.intersection(rel.parts[:-1]):
            continue
        if rel.parts[0].endswith(".egg-info") or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            out += [(f"{rel}:{i}", n) for n in spec_refs(line)]
    return out


@pytest.fixture(scope="module")
def spec_text() -> str:
    assert SPEC.is_file(), "docs/SPEC.md, the definitions document, is missing"
    return SPEC.read_text(encoding="utf-8")


# --- the resolver itself ----------------------------------------------------------------------


def test_spec_refs_reads_single_and_listed_sections():
    sec = "§"
    text = f"see SPEC {sec}4.1, {sec}7; SPEC {sec}5's order; SPEC {sec}8). And SPEC {sec}3 and {sec}9."
    assert spec_refs(text) == ["4.1", "7", "5", "8", "3", "9"]
    assert spec_refs(f"the paper {sec}3.3, a SPEC_LAYER_METRICS constant") == []


def test_spec_headings_reads_numbered_levels_two_and_three():
    doc = "# Title\n## Contents\n## 1. Model\n### 1.1 Regimes\n## 5.1 Packed\n#### 9.9 too deep\n## 12.x\n"
    assert spec_headings(doc) == ["1", "1.1", "5.1"]


def test_unresolved_reports_a_reference_to_a_missing_section():
    sec = "§"  # written apart, so that this file cites no missing section itself
    heads = set(spec_headings("## 4. Metrics\n### 4.1 The layer probe\n"))
    fake = spec_refs(f"SPEC {sec}4.1, {sec}12 and {sec}4.2")
    bad = unresolved([("fake.py:1", n) for n in fake], heads)
    assert bad == [f"fake.py:1: SPEC {sec}12", f"fake.py:1: SPEC {sec}4.2"]


def test_repository_refs_finds_a_planted_reference(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text('"""Stats (SPEC ' + '§8, §13)."""\n')
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "dep.py").write_text("# SPEC " + "§99\n")
    assert repository_refs(tmp_path) == [("pkg/mod.py:1", "8"), ("pkg/mod.py:1", "13")]


# --- the document against the repository ----------------------------------------------------


def test_every_spec_reference_resolves(spec_text):
    refs = repository_refs()
    packages = [r for r in refs if not r[0].startswith("tests/")]
    assert packages and any(r[0].startswith("tests/") for r in refs), "no SPEC § references found"
    bad = unresolved(refs, set(spec_headings(spec_text)))
    assert not bad, "references to sections docs/SPEC.md lacks:\n" + "\n".join(bad)


def test_headings_are_unique_and_subsections_have_parents(spec_text):
    heads = spec_headings(spec_text)
    assert len(heads) == len(set(heads)), f"duplicate section numbers: {heads}"
    top = [h for h in heads if "." not in h]
    assert top == [str(i) for i in range(1, len(top) + 1)], f"top-level sections out of order: {top}"
    orphans = [h for h in heads if "." in h and h.split(".")[0] not in top]
    assert not orphans, f"subsections without their section: {orphans}"


def test_the_documents_own_cross_references_resolve(spec_text):
    heads = set(spec_headings(spec_text))
    cited = set(re.findall(rf"§({_NUM})", spec_text))
    assert cited - heads == set(), f"docs/SPEC.md cites sections it lacks: {sorted(cited - heads)}"


def test_contents_lists_every_section(spec_text):
    contents = spec_text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    missing = [h for h in spec_headings(spec_text) if not re.search(rf"\[{re.escape(h)}\.? ", contents)]
    assert not missing, f"sections missing from the table of contents: {missing}"


def test_readme_links_the_definitions_document():
    text = README.read_text(encoding="utf-8")
    assert re.search(r"\]\(docs/SPEC\.md(#[^)]*)?\)", text), "README.md does not link docs/SPEC.md"
    stale = [m.start() for m in re.finditer(r"(?<!docs/)\bSPEC\.md", text)]
    assert not stale, "README.md names SPEC.md outside docs/ (a file not in the repository)"


# --- the document names what the code defines -------------------------------------------------


def test_every_store_column_is_defined(spec_text):
    from sweep.store.schema import SCHEMAS

    cols = {f.name for schema in SCHEMAS.values() for f in schema}
    undocumented = sorted(c for c in cols if f"`{c}`" not in spec_text)
    assert not undocumented, f"store columns docs/SPEC.md does not define: {undocumented}"


def test_every_condition_and_strength_default_is_documented(spec_text):
    from interventions import PAPER_CONDITIONS, REGISTRY

    for name in PAPER_CONDITIONS:
        assert f"`{name}`" in spec_text, f"condition {name} is not in docs/SPEC.md"
        for f in dataclasses.fields(REGISTRY[name]):
            row = re.compile(rf"^\|[^\n]*`{name}`[^\n]*\|\s*`{f.name}`\s*\|\s*`{f.default!r}`\s*\|", re.M)
            assert row.search(spec_text), (
                f"docs/SPEC.md §5 lacks the strengths row | `{name}` | `{f.name}` | `{f.default!r}` |")


def test_every_init_and_preset_is_named(spec_text):
    from model.qk_init import PAPER_INITS
    from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS

    names = [*PAPER_INITS, *BASELINE_PRESETS, *INTERVENTION_PRESETS]
    assert not [n for n in names if f"`{n}`" not in spec_text]


# --- the paths the documentation names exist -------------------------------------------------

#: What may be described in the past tense (paths that once were): the log of what was tried.
HISTORY = {"LOG.md"}
#: Prose that names repository paths: the README, docs/ and the measured results.
PROSE = ["README.md", "bench/RESULTS.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _top_level(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and p.name not in SKIP_DIRS - {"docs"} and not p.name.endswith(".egg-info")
                  and (not p.name.startswith(".") or p.name == ".ci"))


def path_pattern(root: Path = ROOT) -> re.Pattern[str]:
    """A repository path: a top-level folder of ``root``, a slash and more (not part of a longer name)."""
    tops = "|".join(re.escape(d) for d in _top_level(root))
    return re.compile(rf"(?<![\w./-])((?:{tops})/[\w./-]*[\w/])")


def named_paths(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Repository paths named in ``text``; a pattern (``*``, ``<name>``, ``{a,b}``) is not a path."""
    return [m.group(1) for m in pattern.finditer(text) if not re.search(r"[*<>{}]", m.group(1))]


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return sorted(out)


def missing_paths(root: Path = ROOT) -> list[str]:
    """``file:line: path`` for every named repository path, or relative link, that does not exist."""
    pattern, bad = path_pattern(root), []
    for rel in PROSE:
        for i, line in enumerate((root / rel).read_text(encoding="utf-8").splitlines(), 1):
            links = [t for t in _LINK.findall(line) if "://" not in t and not t.startswith("mailto:")]
            bad += [f"{rel}:{i}: {p}" for p in named_paths(line, pattern) if not (root / p).exists()
                    and p not in links]
            bad += [f"{rel}:{i}: link {t}" for t in links if not ((root / rel).parent / t).exists()]
    for path in sorted(_files(root)):
        rel = path.relative_to(root)
        if path.suffix not in (".py", ".sh") or str(rel) in HISTORY:
            continue
        source = path.read_text(encoding="utf-8")
        chunks = python_prose(source) if path.suffix == ".py" else [
            (i, line) for i, line in enumerate(source.splitlines(), 1) if line.lstrip().startswith("#")]
        for line, text in chunks:
            bad += [f"{rel}:{line}: {p}" for p in named_paths(text, pattern) if not (root / p).exists()]
    return bad


def test_missing_paths_finds_planted_ones(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "gpt.py").write_text(
        '"""Built by ``model/stack.py``; see model/gpt.py."""\n# model/old.py did this once\nx = "model/gone.py"\n')
    for rel in PROSE:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "README.md").write_text("`model/gpt.py`, [a page](docs/none.md), `model/*.py`, `runs/x`\n")
    assert missing_paths(tmp_path) == ["README.md:1: link docs/none.md",
                                       "model/gpt.py:1: model/stack.py", "model/gpt.py:2: model/old.py"]


def test_every_named_path_exists():
    bad = missing_paths()
    assert not bad, "paths named but not in the repository (LOG.md may name what once was):\n" + "\n".join(bad)


def layout_table(markdown: str) -> dict[str, set[str]]:
    """docs/architecture.md's layout table: package folder -> the module files its row names."""
    section = markdown.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w/]+/)` \|(.*)\|[^|]*\|\s*$", section, re.M)
    return {pkg: set(re.findall(r"`([\w]+\.(?:py|sh))`", cells)) for pkg, cells in rows}


def test_layout_table_matches_the_tree():
    table = layout_table((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    packages = sorted(f"{p.parent.relative_to(ROOT)}/" for p in ROOT.glob("*/**/__init__.py")
                      if p.parts[len(ROOT.parts)] not in {"tests", *SKIP_DIRS} and ".egg-info" not in str(p))
    assert sorted(table) == packages, "layout rows differ from the tree's packages"
    for pkg, named in table.items():
        folder = ROOT / pkg
        tree = {p.name for p in folder.iterdir() if p.suffix in (".py", ".sh") and p.name != "__init__.py"}
        tree -= {"__main__.py"} - named  # a package's __main__ may go unnamed beside its cli.py
        assert named - tree == set(), f"{pkg}: the table names modules that do not exist: {sorted(named - tree)}"
        assert tree - named == set(), f"{pkg}: modules the table does not name: {sorted(tree - named)}"
