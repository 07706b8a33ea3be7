"""Interventions on the key pathway (SPEC §5), each acting only through the loop's hooks."""

from interventions.base import REGISTRY, Intervention, make_intervention, register

__all__ = ["REGISTRY", "Intervention", "make_intervention", "register"]
