"""sweep/trial/trainable.py's pieces outside Tune: layer means for Tune's table and the checkpoint loader.
(A trial end to end, its retry from a checkpoint included, is in test_sweep_driver_runner.py; a planted
pickle refused by ``load_state`` is in test_security.py.)"""

from __future__ import annotations

import pytest
import torch

from sweep.trial.trainable import layer_mean, load_state


def test_layer_mean_skips_missing_values() -> None:
    rows = [{"pr_k": 1.0}, {"pr_k": None}, {"pr_k": 4.0}, {"other": 9.0}]
    assert layer_mean(rows, "pr_k") == pytest.approx((1.0 + 4.0) / 2)
    assert layer_mean([{"pr_k": None}], "pr_k") is None and layer_mean([], "pr_k") is None


def test_load_state_round_trips_plain_tensors_and_containers(tmp_path) -> None:
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "epoch": 2, "step": 40,
             "rng": [torch.tensor([1, 2], dtype=torch.uint8)], "name": "s37"}
    torch.save(state, tmp_path / "state.pt")
    got = load_state(tmp_path / "state.pt")
    assert got.keys() == state.keys() and (got["epoch"], got["step"], got["name"]) == (2, 40, "s37")
    assert torch.equal(got["model"]["w"], state["model"]["w"]) and torch.equal(got["rng"][0], state["rng"][0])
