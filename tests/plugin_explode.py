"""A plugin condition whose ``after_step`` always raises: a deterministic error in a researcher's code
(``--plugin tests.plugin_explode --conditions none,explode``; tests/test_sweep_trial_failfast.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from interventions import Intervention, register


@register
@dataclass
class Explode(Intervention):
    """Raises after its first optimiser step, every time."""

    name: ClassVar[str] = "explode"
    label: ClassVar[str] = "Explode"
    predicted: ClassVar[dict[str, int]] = {}

    def after_step(self, model: nn.Module) -> None:
        raise ValueError("explode: after_step always fails")
