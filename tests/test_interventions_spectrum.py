"""interventions/spectrum.py: the K spectrum clamp fixes the singular values every step and restores sigma0 from its state."""

from __future__ import annotations

import io

import pytest
import torch
from intervention_helpers import (
    EPOCHS,
    SEED,
    STEPS,
    make_trainer,
    none_run,
    train,
)

from interventions import Intervention, make_intervention
from model.report import EpochReport
from model.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# -- spectrum clamp ---------------------------------------------------------------


def k_svdvals(model: torch.nn.Module) -> torch.Tensor:
    return torch.linalg.svdvals(torch.stack([b.attn.k_proj.weight.detach() for b in model.blocks]).double())


def test_k_spectrum_clamp_fixes_singular_values_every_step() -> None:
    iv = make_intervention("k_spectrum_clamp")
    checked_steps = []
    wrapped = iv.after_step

    def after_step(model: torch.nn.Module) -> None:
        wrapped(model)
        torch.testing.assert_close(k_svdvals(model), iv.sigma0, rtol=1e-5, atol=1e-7)
        checked_steps.append(1)

    iv.after_step = after_step
    wk0: list[torch.Tensor] = []

    def on_epoch(trainer: Trainer, report: EpochReport) -> None:
        model = trainer.model
        if report.epoch == 0:
            wk0.extend(b.attn.k_proj.weight.detach().clone() for b in model.blocks)
        torch.testing.assert_close(k_svdvals(model), iv.sigma0, rtol=1e-5, atol=1e-7)

    trainer, _ = train(iv, on_epoch)
    assert len(checked_steps) == EPOCHS * STEPS
    torch.testing.assert_close(iv.sigma0, torch.linalg.svdvals(torch.stack(wk0).double()))
    for b, w0 in zip(trainer.model.blocks, wk0, strict=True):
        assert (b.attn.k_proj.weight - w0).abs().max() > 1e-3  # singular vectors did move
    # control: without the clamp the spectrum drifts well beyond the tolerance
    drift = (k_svdvals_from(none_run()[0]) - iv.sigma0).abs() / iv.sigma0
    assert drift.max() > 1e-3


def k_svdvals_from(p: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.linalg.svdvals(torch.stack([p[f"blocks.{i}.attn.k_proj.weight"] for i in range(2)]).double())


def test_k_spectrum_clamp_state_restores_sigma0() -> None:
    a, b = make_intervention("k_spectrum_clamp"), make_intervention("k_spectrum_clamp")
    a.setup(make_trainer(Intervention()).model)
    b.setup(make_trainer(Intervention(), model_seed=SEED + 1).model)
    assert not torch.allclose(a.sigma0, b.sigma0)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b.load_state_dict(torch.load(buf))
    assert torch.equal(a.sigma0, b.sigma0)
