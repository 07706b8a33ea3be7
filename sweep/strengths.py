"""``--strengths``: the dose–response axis of an intervention sweep (SPEC §5).

``--strengths forced_k_contraction.lam=0,0.02,0.05`` (the flag repeated, or several words) sweeps a
condition's strengths — its own dataclass fields, listed with their defaults by ``--help`` from the
registry. Each value is its own cell (``Preset.strength_cells``). Every check runs in the driver
before Ray starts and fails with one line naming the word as typed and what is valid.
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable

from interventions import REGISTRY as INTERVENTIONS
from interventions import default_strengths
from sweep.cli import UsageError

STRENGTHS_FLAG = "--strengths"


def strengths_help() -> str:
    """``--strengths``'s help: the syntax and every registered condition's fields with their defaults."""
    with_fields = [f"{c}.{f}={v:g}" for c in INTERVENTIONS for f, v in default_strengths(c).items()]
    without = [c for c in INTERVENTIONS if not default_strengths(c)]
    return ("sweep a condition's strengths, CONDITION.FIELD=V1,V2,... (each value its own cell; numbers >= 0; "
            "repeatable). Fields and defaults: " + (", ".join(with_fields) or "none")
            + (f"; no strength: {', '.join(without)}" if without else ""))


def add_strengths_flag(g: argparse._ArgumentGroup) -> None:
    """``--strengths``, the dose–response axis (SPEC §5), with the registry's fields in its help."""
    g.add_argument(STRENGTHS_FLAG, action="append", nargs="+", metavar="COND.FIELD=V,...", help=strengths_help())


def _strength_fields_text() -> str:
    fields_ = [f"{c}.{f}" for c in INTERVENTIONS for f in default_strengths(c)]
    return ", ".join(fields_) or "none registered"


def check_strengths(strengths: tuple, conditions: tuple[str, ...],
                    shown: Callable[[str, str, tuple], str] | None = None) -> None:
    """Each (condition, field, values) triple: a registered condition of the sweep, one of its
    fields, distinct finite numbers >= 0, each (condition, field) once. Errors name the triple as
    ``shown`` writes it (the ``--strengths`` word as typed, for the CLI)."""
    if isinstance(strengths, str) or not isinstance(strengths, tuple | list):
        raise ValueError(f"Preset.strengths must be a tuple of (condition, field, values), got {strengths!r}")
    seen: set[tuple[str, str]] = set()
    for item in strengths:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise ValueError(f"Preset.strengths entries are (condition, field, values), got {item!r}")
        cond, fld, values = item
        text = shown(cond, fld, values) if shown else f"{cond}.{fld}={','.join(map(str, values))}"
        where = f"{STRENGTHS_FLAG} {text}"
        if cond not in INTERVENTIONS:
            raise UsageError(f"{where}: unknown condition {cond!r}; conditions with strengths: "
                             f"{_strength_fields_text()}")
        allowed = default_strengths(cond)
        if not allowed:
            raise UsageError(f"{where}: {cond} has no strength; valid: {_strength_fields_text()}")
        if fld not in allowed:
            raise UsageError(f"{where}: {cond} has no field {fld!r}; valid: "
                             + ", ".join(f"{cond}.{f} (default {v:g})" for f, v in allowed.items()))
        if cond not in conditions:
            raise UsageError(f"{where}: {cond} is not among the sweep's conditions ({', '.join(conditions)}); "
                             f"add it to --conditions")
        if (cond, fld) in seen:
            raise UsageError(f"{where}: {cond}.{fld} is given twice; give all its values once")
        seen.add((cond, fld))
        if not isinstance(values, tuple | list) or not values:
            raise UsageError(f"{where}: give at least one value")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise UsageError(f"{where}: a strength must be a finite number >= 0, got {v!r}")
        if len(set(map(float, values))) != len(values):
            raise UsageError(f"{where}: a value is repeated; give each strength once")


def parse_strengths(words: list[list[str]] | None, conditions: tuple[str, ...]
                    ) -> tuple[tuple[str, str, tuple[float, ...]], ...]:
    """``--strengths`` words (``COND.FIELD=V1,V2``; the flag repeated or several words) as
    ``Preset.strengths``; one clear error naming the word as typed and what is valid."""
    out, typed = [], {}
    for word in (w for part in words or [] for w in part):
        left, eq, right = word.partition("=")
        cond, dot, fld = left.rpartition(".")
        if not (eq and dot and cond and fld and right.strip(",")):
            raise UsageError(f"{STRENGTHS_FLAG} {word!r}: expected CONDITION.FIELD=V1,V2,... "
                             f"(e.g. forced_k_contraction.lam=0,0.05,0.2); fields: {_strength_fields_text()}")
        values = []
        for v in right.split(","):
            if not v.strip():
                continue
            try:
                values.append(float(v))
            except ValueError:
                raise UsageError(f"{STRENGTHS_FLAG} {word}: {v!r} is not a number; a strength is a "
                                 "number >= 0") from None
        out.append((cond, fld, tuple(values)))
        typed[(cond, fld)] = word
    result = tuple(out)
    check_strengths(result, conditions, shown=lambda c, f, _: typed[(c, f)])
    return result
