"""requirements.lock: the one lock of tested versions agrees with pyproject.toml and is what
every install path uses (make demo / make test / CI through the Makefile, every cluster node
through cluster/ray_node.sh)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"


def lock_pins(text: str) -> dict[str, Version]:
    """Canonical name -> pinned version; every non-comment line must be ``name==version``."""
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name), f"not an exact pin: {raw!r}"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def project_requirements() -> list[Requirement]:
    """Every dependency of pyproject.toml, each extra included (self-references dropped)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def disagreements(pins: dict[str, Version], reqs: list[Requirement]) -> list[str]:
    out = []
    for req in reqs:
        have = pins.get(canonicalize_name(req.name))
        if have is None:
            out.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(have, prereleases=True):
            out.append(f"{req.name}: lock has {have}, pyproject.toml wants {req.specifier}")
    return out


def test_lock_agrees_with_pyproject():
    assert disagreements(lock_pins(LOCK.read_text()), project_requirements()) == []


def test_agreement_check_can_fail():
    reqs = [Requirement("ray[tune]>=2.60,<2.61"), Requirement("scipy>=1.11")]
    assert disagreements({"ray": Version("2.61.0")}, reqs) == [
        "ray: lock has 2.61.0, pyproject.toml wants <2.61,>=2.60",
        "scipy: not in the lock",
    ]


def test_lock_pins_the_stack_exactly():
    pins = lock_pins(LOCK.read_text())
    assert pins["torch"] == Version("2.13.0")  # no +cpu: the same pin admits the CUDA build
    for name in ("ray", "numpy", "transformers", "huggingface-hub", "pytest", "pyarrow"):
        assert name in pins, name


def test_every_install_path_uses_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert "LOCK    := requirements.lock" in make
    installs = [ln for ln in make.splitlines() if "$(BIN)/pip install" in ln and "upgrade pip" not in ln]
    assert installs and all("-c $(LOCK)" in ln for ln in installs), installs
    node = (ROOT / "cluster" / "ray_node.sh").read_text()
    assert 'lock="$src/requirements.lock"' in node
    node_installs = [ln for ln in node.splitlines() if "pip\" install" in ln and "upgrade pip" not in ln]
    assert node_installs and all('-c "$lock"' in ln for ln in node_installs), node_installs
    assert "bash .ci/run" not in make  # CI goes through `make test`, see .ci/run
    assert "make test" in (ROOT / ".ci" / "run").read_text()
