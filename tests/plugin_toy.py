"""A researcher's plugin module, as ``--plugin tests.plugin_toy`` loads it: one regime, one condition.

Nothing in the package names either; importing this module is all it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from interventions import Intervention, register
from model.qk_init import register_init


@register_init("plugin_half_copy", label="Plugin Half Copy", coupled=True)
def plugin_half_copy(wq, wk, gen):
    """W_Q normal(0, 0.02); W_K half of it."""
    wq.normal_(0.0, 0.02, generator=gen)
    wk.copy_(0.5 * wq)


@register
@dataclass
class PluginFreezeV(Intervention):
    """W_V and its bias are not trained."""

    name: ClassVar[str] = "plugin_freeze_v"
    label: ClassVar[str] = "Plugin: freeze V"
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1}

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        return ".v_proj." not in name
