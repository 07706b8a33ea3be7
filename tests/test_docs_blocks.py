"""README.md and every docs/*.md page: each ```bash block runs and each ```python block executes.

The convention (docs/architecture.md, "Docs that a test runs"), which keeps a command whose
flags change from reaching a newcomer before a test:

- ```bash blocks run as they are, with ``bash -e -u -c`` (as mktestdocs' ``exec_bash``), in a scratch
  folder that mirrors the repository (its top-level files and packages linked in) and holds a
  small store and Tune experiment under the demo's names (``runs/store``,
  ``runs/ray/baseline-demo``), built once by this module from the ``smoke`` preset. ``python``
  is this interpreter; ``make`` runs as ``make -n``. A command that would train at scale carries
  ``--dry-run`` in the page; one that reads results reads that small store.
- ```python blocks execute, each in a fresh interpreter in the same folder; one whose first line
  names a file (``# my_study.py``) is also saved as that file, so that the page's bash blocks
  can load it (``--plugin my_study``). A page's Python blocks run before its bash blocks, each
  kind in page order.
- ```text blocks and any other fence (``json``, bare) are not run.

Every page of docs/ is collected, pages added later included; docs/SPEC.md (the definitions
document, checked by test_docs.py) has no runnable block, which
``test_the_definitions_document_has_no_runnable_block`` keeps true. Not named after one module:
it checks documents against the whole repository. Code blocks are found by mktestdocs
(``grab_code_blocks``), not by a parser of our own. Every block is a fresh process that spends
most of its time importing torch and Ray, so two pages run at once (``PAGE_WORKERS``), each with
its folder and environment given to its processes: mktestdocs' ``exec_bash`` runs in this
process's folder, which threads cannot each set.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mktestdocs import grab_code_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Never linked into the scratch folder: run data, environments, caches, version control.
PRIVATE = {".git", ".venv", ".lock-venv", ".floors-venv", "runs", "data", ".pytest_cache", ".ruff_cache", ".cluster",
           "__pycache__"}
#: ``# my_study.py`` as the first line of a Python block: save the block as that file too.
SAVE_AS = re.compile(r"^#\s*([A-Za-z_][A-Za-z0-9_]*\.py)\s*$")
#: Pages run at once (the machines have 2 cores; a block is mostly one process's imports).
PAGE_WORKERS = 2


def page_blocks(path: Path) -> tuple[list[str], list[str]]:
    """(python blocks, bash blocks) of a page, each in page order."""
    text = path.read_text(encoding="utf-8")
    return grab_code_blocks(text, lang="python"), grab_code_blocks(text, lang="bash")


def mirror(dest: Path, runs: Path | None = None) -> Path:
    """A folder that looks like the repository root (links to its top-level entries), with
    ``runs/store`` and ``runs/ray`` linked to ``runs``'s and a ``make`` that only prints."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name not in PRIVATE and not entry.name.endswith(".egg-info"):
            (dest / entry.name).symlink_to(entry)
    (dest / "runs").mkdir()
    if runs is not None:
        for name in ("store", "ray"):
            (dest / "runs" / name).symlink_to(runs / name)
    venv(dest / ".venv")
    tools = dest / ".bin"
    tools.mkdir()
    make = shutil.which("make")
    (tools / "make").write_text("#!/bin/sh\n" + (f'exec {make} -n "$@"\n' if make else
                                                 'echo "make is not installed: skipped make $*"\n'))
    (tools / "make").chmod(0o755)
    return dest


def venv(dest: Path) -> None:
    """``.venv`` as ``make`` leaves it: this interpreter's venv, or a stand-in with its ``python``
    and an ``activate`` when the tests run outside a venv."""
    if sys.prefix != sys.base_prefix and (Path(sys.prefix) / "bin" / "activate").is_file():
        dest.symlink_to(sys.prefix)
        return
    (dest / "bin").mkdir(parents=True)
    (dest / "bin" / "python").symlink_to(sys.executable)
    (dest / "bin" / "activate").write_text(f'PATH="{dest / "bin"}:$PATH"; export PATH\ndeactivate () {{ :; }}\n')


def site_env(site: Path) -> dict[str, str]:
    """The environment a page's blocks run in: ``site``'s ``make`` first on PATH, then this
    interpreter's ``python``; the repository on PYTHONPATH."""
    path = os.pathsep.join([str(site / ".bin"), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}


def run_python(source: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """One Python block in a fresh interpreter (a plugin it registers stays out of this process)."""
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    if m := SAVE_AS.match(first):
        (cwd / m.group(1)).write_text(source, encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", source], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"python block failed:\n{source}\n--- stderr ---\n{out.stderr[-3000:]}"


def run_bash(source: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """One bash block as mktestdocs' ``exec_bash`` runs it (``bash -e -u -c``), in ``cwd``."""
    out = subprocess.run(["bash", "-e", "-u", "-c", source], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, (f"bash block failed (exit {out.returncode}):\n{source}\n--- output ---\n"
                                 f"{(out.stdout + out.stderr)[-3000:]}")


def run_page(page: Path, site: Path) -> None:
    """A page's Python blocks, then its bash blocks, each kind in page order, in ``site``."""
    python, bash = page_blocks(page)
    env = site_env(site)
    for source in python:
        run_python(source, site, env)
    for source in bash:
        run_bash(source, site, env)


@pytest.fixture(scope="module")
def small_runs(ray_env, tmp_path_factory) -> Path:
    """``runs/store`` and ``runs/ray/baseline-demo`` from a 4-run smoke sweep (2 × 2 steps each)."""
    runs = tmp_path_factory.mktemp("docs-runs")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "sweep.baseline", "--preset", "smoke", "--name", "baseline-demo",
                          "--store", str(runs / "store"), "--storage", str(runs / "ray"), "--num-cpus", "2"],
                         cwd=runs, env=env, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    return runs


# --- the convention's own parts ---------------------------------------------------------------


def test_blocks_are_found_by_language_in_page_order(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```bash\necho 1\n```\n```text\nnot run\n```\n```python\nx = 1\n```\n```bash\necho 2\n```\n"
                    "```json\n{}\n```\n")
    python, bash = page_blocks(page)
    assert python == ["x = 1\n"] and bash == ["echo 1\n", "echo 2\n"]


def test_a_failing_block_fails(tmp_path):
    site = mirror(tmp_path / "site")
    run_bash("python -m sweep.baseline --help > /dev/null\n", site, site_env(site))
    with pytest.raises(AssertionError, match="bash block failed"):
        run_bash("python -m sweep.baseline --no-such-flag\n", site, site_env(site))
    with pytest.raises(AssertionError, match="bash block failed"):
        run_bash("false\necho not reached\n", site, site_env(site))  # -e: the first failure stops the block
    with pytest.raises(AssertionError, match="python block failed"):
        run_python("import sweep.no_such_module\n", site, site_env(site))


def test_make_only_prints_and_python_blocks_save_their_file(tmp_path):
    site = mirror(tmp_path / "site")
    env = site_env(site)
    assert shutil.which("make", path=env["PATH"]) == str(site / ".bin" / "make")
    out = subprocess.run(["bash", "-c", "make demo"], cwd=site, env=env, capture_output=True, text=True)
    if shutil.which("make", path=os.defpath):
        assert out.returncode == 0 and "sweep.demo" in out.stdout, out.stderr
    assert not any((site / "runs").iterdir())  # printed, not run: the demo wrote nothing
    run_python("# my_plugin.py\nVALUE = 3\n", site, env)
    assert (site / "my_plugin.py").read_text().startswith("# my_plugin.py")


def test_every_page_is_collected():
    names = {p.name for p in PAGES}
    assert {"README.md", "SPEC.md", "architecture.md", "browsing.md"} <= names
    assert all(p.parent.name == "docs" for p in PAGES[1:])


def test_the_definitions_document_has_no_runnable_block():
    assert page_blocks(ROOT / "docs" / "SPEC.md") == ([], [])


# --- every page ---------------------------------------------------------------------------------


def runnable(page: Path) -> bool:
    return any(page_blocks(page))


@pytest.fixture(scope="module")
def page_failures(small_runs, tmp_path_factory) -> dict[Path, str]:
    """Every runnable page run in its own site, ``PAGE_WORKERS`` pages at a time, the pages with
    the most ``python`` commands first; what failed, by page (a page that passed is absent)."""
    pages = sorted(filter(runnable, PAGES), key=lambda p: -sum(b.count("python") for b in page_blocks(p)[1]))
    root = tmp_path_factory.mktemp("pages")

    def one(page: Path) -> str | None:
        site = mirror(root / page.relative_to(ROOT).as_posix().replace("/", "_"), small_runs)
        try:
            run_page(page, site)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(PAGE_WORKERS) as pool:
        outcomes = dict(zip(pages, pool.map(one, pages), strict=True))
    return {page: failure for page, failure in outcomes.items() if failure is not None}


@pytest.mark.ray
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_blocks_run(page, page_failures):
    if not runnable(page):
        pytest.skip(f"{page.name}: no bash or python block")
    assert page not in page_failures, page_failures[page]
