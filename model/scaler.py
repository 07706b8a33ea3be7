"""fp16 loss scaling per member (SPEC §3): ``torch.amp.GradScaler``'s rule, one scale per member.
No Ray, no files.

A GradScaler keeps one scale and one found-inf flag for the whole optimiser: in a pack, one member's
overflow would skip every member's step. ``MemberScaler`` keeps a scale [M] and a growth tracker
[M]: member i's loss is multiplied by its own scale, its gradients (the slice [i] of each stacked
gradient, or the whole gradients of one run) are divided by it and checked for inf/NaN on their
own, and the step is skipped for the members that overflowed only (``model.optimiser``: on the
device, without a host read; the others' AdamW update is the one they would have had alone, and a
skipped member's step count stays where its own run's would). Scales follow GradScaler's defaults: start at
2^16, halve on an overflow, double after 2000 steps without one. Powers of two: scaling and
unscaling are exact, so a member that never overflows trains as it would without scaling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

INIT_SCALE = 2.0 ** 16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000


class MemberScaler:
    """One loss scale per member; disabled (every method a no-op) unless ``enabled`` (fp16 autocast)."""

    def __init__(self, members: int, device: torch.device, enabled: bool) -> None:
        self.enabled = enabled
        self.scale = torch.full((members,), INIT_SCALE, device=device, dtype=torch.float32)
        self.growth = torch.zeros(members, device=device, dtype=torch.int32)

    def scale_loss(self, loss: Tensor) -> Tensor:
        """``loss`` [] (one run) or [M] times each member's scale."""
        if not self.enabled:
            return loss
        return loss * (self.scale if loss.dim() else self.scale[0])

    @torch.no_grad()
    def unscale_(self, grads: Sequence[Tensor | None], packed: bool) -> Tensor | None:
        """Divide the gradients by their member's scale in place; [M] bool: whose gradients hold
        an inf or NaN (None when disabled). ``packed``: gradients are [M, ...]."""
        if not self.enabled:
            return None
        inv = self.scale.double().reciprocal().float()  # as GradScaler: exact for powers of two
        found = torch.zeros_like(self.scale, dtype=torch.bool)
        for g in grads:
            if g is None:
                continue
            if packed:
                g.mul_(inv.view(-1, *([1] * (g.dim() - 1))))
                found |= ~torch.isfinite(g).flatten(1).all(dim=1)
            else:
                g.mul_(inv[0])
                found |= ~torch.isfinite(g).all()
        return found

    @torch.no_grad()
    def update(self, found: Tensor) -> None:
        """GradScaler's rule per member: halve the scale of those that overflowed (their tracker back
        to 0), count a clean step for the others, double a scale after ``GROWTH_INTERVAL`` clean steps."""
        self.growth.copy_(torch.where(found, 0, self.growth + 1))
        grow = self.growth >= GROWTH_INTERVAL
        self.scale.copy_(torch.where(found, self.scale * BACKOFF_FACTOR,
                                     torch.where(grow, self.scale * GROWTH_FACTOR, self.scale)))
        self.growth.masked_fill_(grow, 0)

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale.cpu(), "growth": self.growth.cpu()} if self.enabled else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """This class's state, a ``GradScaler``'s (``scale``, ``_growth_tracker``: one run's) or ``{}``
        (a disabled scaler: nothing to load)."""
        if not state:
            return
        self.scale.copy_(torch.as_tensor(state["scale"], dtype=torch.float32))
        self.growth.copy_(torch.as_tensor(state.get("growth", state.get("_growth_tracker", 0)), dtype=torch.int32))
