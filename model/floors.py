"""The oldest versions of its dependencies qkgeom runs with (pyproject's lower bounds), checked when
a package is imported: an older one is one line naming the installed and the required version, and
exit status 2, instead of a crash deep inside the first probe. Reads installed metadata only (no
import of the packages themselves); a package that is not installed is left to its importer.

| package | floor | what needs it |
|---|---|---|
| torch | 2.9 | per-backend ``fp32_precision`` (``model.recipe.set_tf32``, ``metrics.precision``): 2.8 has none |
| scipy | 1.15 | the oldest the fast tests ran on (``make test-floors``); the statistics need ``ttest_1samp(...).confidence_interval`` (1.10) and ``binomtest`` (the bootstrap that needed 1.15's ``rng=`` is gone) |
| ray | 2.60 | Tune's ``tune.report``/``tune.get_checkpoint`` API and the pinned 2.60 series |
| numpy | 1.26 | the oldest numpy with Python 3.11 wheels that every other floor accepts |
| pandas | 2.1 | pyproject's range (``make test-floors`` runs the fast tests on it) |
| pyarrow | 17 | ``ray[tune]`` 2.60 requires it (found by ``make test-floors``: 15 does not resolve) |
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from importlib import metadata

FLOORS: dict[str, str] = {"torch": "2.9", "scipy": "1.15", "ray": "2.60", "numpy": "1.26", "pandas": "2.1",
                          "pyarrow": "17"}


def release(version: str) -> tuple[int, ...]:
    """``2.13.0+cpu`` → (2, 13, 0): the leading release numbers."""
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def too_old(names: Iterable[str], version_of: Callable[[str], str] | None = None) -> list[str]:
    """One sentence per installed package of ``names`` older than its floor (``version_of``: the
    installed version of a distribution, ``importlib.metadata.version`` by default)."""
    version_of = version_of or metadata.version
    out = []
    for name in names:
        try:
            installed = version_of(name)
        except metadata.PackageNotFoundError:
            continue
        if release(installed) < release(FLOORS[name]):
            out.append(f"{name} {installed} is installed, qkgeom needs {name} >= {FLOORS[name]}")
    return out


def check_floors(names: Iterable[str], version_of: Callable[[str], str] | None = None) -> None:
    """Exit with status 2 and one line on stderr when an installed package of ``names`` is too old."""
    old = too_old(names, version_of)
    if old:
        print(f"qkgeom: {'; '.join(old)} (pip install -c requirements.lock -e .)", file=sys.stderr)
        raise SystemExit(2)
