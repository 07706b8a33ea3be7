"""The study's vocabulary, read from the two registries and nowhere else.

Init regimes come from ``model.qk_init.QK_INITS`` (``@register_init``: function,
label, colour, coupled flag); conditions from ``interventions.REGISTRY``
(``@register`` on an ``Intervention`` subclass: ``name``, ``label``,
``predicted``). Everything is computed on each call, so a regime or condition
registered by a ``--plugin`` module after import is seen everywhere.

A name found in the store but in neither registry (a store written with a
plugin, read without it) is still reported: its label is the raw name, its
colour ``UNKNOWN_COLOUR``, and ``unknown_names`` lists it.
"""

from __future__ import annotations

from collections.abc import Iterable

from interventions import CONTROL, PAPER_CONDITIONS, REGISTRY
from interventions import default_strengths as _default_strengths
from model.qk_init import DEFAULT_INIT, QK_INITS

#: Colour of a regime no registry knows.
UNKNOWN_COLOUR = "#7f7f7f"

__all__ = ["CONTROL", "DEFAULT_INIT", "UNKNOWN_COLOUR", "conditions", "condition_label",
           "coupled_inits", "default_strengths", "init_colour", "init_label", "inits", "predicted", "slope_groups",
           "uncoupled_inits", "unknown_names"]


# --- init regimes ---------------------------------------------------------------------------


def inits() -> tuple[str, ...]:
    """Every registered regime, in registration order (the paper's three first)."""
    return tuple(QK_INITS)


def coupled_inits() -> tuple[str, ...]:
    """Registered regimes whose W_K starts tied to W_Q."""
    return tuple(n for n, r in QK_INITS.items() if r.coupled)


def uncoupled_inits() -> tuple[str, ...]:
    return tuple(n for n, r in QK_INITS.items() if not r.coupled)


def slope_groups() -> dict[str, tuple[str, ...]]:
    """Table 4 groups: name -> the registered inits it pools."""
    return {"uncoupled": uncoupled_inits(), "coupled": coupled_inits(), "pooled": inits()}


def init_label(name: str) -> str:
    r = QK_INITS.get(name)
    return r.label if r else name


def init_colour(name: str) -> str:
    r = QK_INITS.get(name)
    return r.colour if r else UNKNOWN_COLOUR


# --- conditions -----------------------------------------------------------------------------


def conditions() -> tuple[str, ...]:
    """Every registered condition: the paper's six in SPEC §5's order, then the rest."""
    return tuple(c for c in PAPER_CONDITIONS if c in REGISTRY) + tuple(
        c for c in REGISTRY if c not in PAPER_CONDITIONS
    )


def predicted(condition: str) -> dict[str, int]:
    """The class's own ``predicted`` directions ({} for the control and unknown names)."""
    cls = REGISTRY.get(condition)
    return dict(cls.predicted) if cls is not None else {}


def default_strengths(condition: str) -> dict[str, float]:
    """The condition's strengths with their defaults (SPEC §5; {} for unknown names)."""
    return _default_strengths(condition) if condition in REGISTRY else {}


def condition_label(name: str) -> str:
    cls = REGISTRY.get(name)
    return (cls.label or cls.name) if cls is not None else name


# --- names in a store -----------------------------------------------------------------------


def unknown_names(inits_seen: Iterable[str], conditions_seen: Iterable[str]) -> dict[str, list[str]]:
    """The regime and condition names the registries do not know (empty lists: none)."""
    return {
        "inits": sorted({str(i) for i in inits_seen if isinstance(i, str) and i not in QK_INITS}),
        "conditions": sorted({str(c) for c in conditions_seen if isinstance(c, str) and c not in REGISTRY}),
    }
