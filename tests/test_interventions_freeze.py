"""interventions/freeze.py: freeze_q / freeze_k keep the projection fixed and train the rest."""

from __future__ import annotations

import pytest
import torch
from intervention_helpers import (
    EPOCHS,
    params,
    train,
)

from interventions import make_intervention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# -- freezing ---------------------------------------------------------------------


@pytest.mark.parametrize("name,proj", [("freeze_k", "k_proj"), ("freeze_q", "q_proj")])
def test_freeze_keeps_projection_fixed_and_trains_the_rest(name: str, proj: str) -> None:
    frozen_names = {f"blocks.{i}.attn.{proj}.{p}" for i in range(2) for p in ("weight", "bias")}
    snapshots: list[dict[str, torch.Tensor]] = []
    trainer, reports = train(make_intervention(name),
                             on_epoch=lambda t, r: snapshots.append(params(t)))
    assert len(snapshots) == EPOCHS + 1
    initial, final = snapshots[0], snapshots[-1]
    for snap in snapshots[1:]:
        for n in frozen_names:
            assert torch.equal(snap[n], initial[n]), f"{n} moved"
    moved = {n for n in initial if not torch.equal(initial[n], final[n])}
    assert moved == set(initial) - frozen_names
    optimised = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    named = dict(trainer.model.named_parameters())
    for n in frozen_names:
        assert id(named[n]) not in optimised and not named[n].requires_grad
    assert all(id(p) in optimised for n, p in named.items() if n not in frozen_names)
