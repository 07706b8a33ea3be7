"""A run's identity in the store (SPEC §6): ``run_id`` and the ``strengths`` column's text.

Plain Python, no Arrow: the presets and the run spec compute ids while a command parses its flags.
``sweep.store.schema`` re-exports both beside the tables' schemas.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping


def strengths_json(strengths: Mapping[str, float]) -> str:
    """The ``strengths`` column (``layers``, ``epochs``; SPEC §5, §6): canonical JSON of all the run's
    condition's strengths (every dataclass field, sorted keys, floats): ``{"lam": 0.05}`` for
    ``forced_k_contraction`` at its default, ``{}`` for a condition without strengths (``none``,
    ``freeze_k``, every baseline run). Null in stores written before the column: the defaults."""
    return json.dumps({k: float(v) for k, v in strengths.items()}, sort_keys=True)


def _number(v: float) -> str:
    """Shortest round-trip text of a strength for a run id: 0.05 → ``0.05``, 0.0 → ``0``, 1e-5 → ``1e-05``."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def run_id(sweep: str, preset: str, init: str, depth: int, seed: int, condition: str,
           strengths: Mapping[str, float] | None = None) -> str:
    """A run's identity as one readable, path-safe string.

    The same cell always gets the same id, so rerunning it overwrites its rows. ``strengths`` is
    given only for a cell away from its condition's defaults (SPEC §5 dose–response): its fields,
    sorted, are appended as ``.lam0.2`` (``_`` between fields); at the defaults the id is unchanged.
    """
    base = f"{sweep}.{preset}.{init}.L{depth}.s{seed}.{condition}"
    if not strengths:
        return base
    bad = [k for k, v in strengths.items() if not math.isfinite(float(v))]
    if bad:
        raise ValueError(f"strength {bad[0]} must be finite, got {strengths[bad[0]]!r}")
    return base + "." + "_".join(f"{k}{_number(v)}" for k, v in sorted(strengths.items()))
