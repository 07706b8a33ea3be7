"""model/floors.py: an older torch, scipy, pandas, pyarrow or Ray is one line naming the installed and
the required version, and exit 2, when a package is imported; pyproject's lower bounds are the floors."""

from __future__ import annotations

import importlib
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import model
import model.floors as floors
import sweep

ROOT = Path(__file__).resolve().parents[1]


def fake(**versions):
    def version_of(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]
    return version_of


def test_release_reads_the_leading_numbers() -> None:
    assert floors.release("2.13.0+cpu") == (2, 13, 0) and floors.release("1.15.0rc1") == (1, 15, 0)
    assert floors.release("2.9") < floors.release("2.13") and floors.release("15.0.2") >= floors.release("15")


@pytest.mark.parametrize(("name", "old", "ok"), [("torch", "2.8.0+cu128", "2.9.0"), ("scipy", "1.14.1", "1.15.0"),
                                                 ("pandas", "2.0.3", "2.1.0"), ("pyarrow", "16.1.0", "17.0.0"),
                                                 ("ray", "2.59.0", "2.60.0")])
def test_an_older_package_is_one_line_and_exit_2(name, old, ok, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        floors.check_floors([name], fake(**{name: old}))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"{name} {old} is installed, qkgeom needs {name} >= {floors.FLOORS[name]}" in err
    floors.check_floors([name], fake(**{name: ok}))  # at the floor: nothing
    floors.check_floors([name], fake())  # not installed: the importer's business
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("package", "name"), [(model, "torch"), (sweep, "ray"), (sweep, "scipy")])
def test_importing_a_package_checks_its_floors(package, name, monkeypatch, capsys) -> None:
    real = metadata.version
    monkeypatch.setattr(floors.metadata, "version", lambda n: "0.1" if n == name else real(n))
    with pytest.raises(SystemExit) as exc:
        importlib.reload(package)
    assert exc.value.code == 2 and f"{name} 0.1 is installed" in capsys.readouterr().err
    monkeypatch.undo()
    importlib.reload(package)


def test_pyproject_lower_bounds_are_the_floors() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lower = {}
    for dep in deps:
        m = re.match(r"([a-z]+)(\[[^\]]*\])?>=([\d.]+)", dep)
        if m:
            lower[m.group(1)] = m.group(3)
    for name, floor in floors.FLOORS.items():
        assert lower[name] == floor, name
    constraints = dict(line.split("==") for line in (ROOT / "requirements-floors.txt").read_text().splitlines()
                       if "==" in line and not line.startswith("#"))
    for name, floor in floors.FLOORS.items():
        assert floors.release(constraints[name])[:len(floors.release(floor))] == floors.release(floor), name
