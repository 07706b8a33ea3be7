"""interventions/regularisers.py: forced K contraction and the Q/K alignment regulariser against closed forms, and their effect in training."""

from __future__ import annotations

import pytest
import torch
from intervention_helpers import (
    layer_mean,
    make_trainer,
    none_run,
    train,
)

from interventions import make_intervention
from interventions.regularisers import participation_ratio_f32, qk_cos_loss
from metrics.spectra import participation_ratio

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# -- loss helpers -----------------------------------------------------------------


def test_participation_ratio_f32_matches_reference_and_has_gradient() -> None:
    gen = torch.Generator().manual_seed(0)
    for shape in [(200, 16), (10, 32)]:  # covariance and Gram branches
        x = (torch.randn(shape, generator=gen) * torch.linspace(0.1, 3, shape[1])).requires_grad_()
        pr = participation_ratio_f32(x)
        assert pr.dtype == torch.float32
        torch.testing.assert_close(pr.double(), participation_ratio(x.detach()), rtol=1e-5, atol=0)
        pr.backward()
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the trainer calls extra_loss under autocast
        pr = participation_ratio_f32(x.detach())
    assert pr.dtype == torch.float32
    torch.testing.assert_close(pr.double(), participation_ratio(x.detach()), rtol=1e-5, atol=0)


def test_qk_cos_loss_closed_forms() -> None:
    w = torch.randn(8, 8)
    assert qk_cos_loss(w, w).item() == pytest.approx(0.0, abs=1e-6)
    assert qk_cos_loss(w, -w).item() == pytest.approx(2.0, abs=1e-6)


def test_forced_k_contraction_lowers_pr_k() -> None:
    _, reports = train(make_intervention("forced_k_contraction", lam=20.0))
    pr_k, pr_k_none = layer_mean(reports[-1], "pr_k"), layer_mean(none_run()[1], "pr_k")
    assert pr_k < pr_k_none - 1.0, (pr_k, pr_k_none)


def test_forced_k_contraction_needs_a_training_forward() -> None:
    iv = make_intervention("forced_k_contraction")
    trainer = make_trainer(iv)
    trainer.val_losses()  # a no-grad eval pass must not leave captures behind
    with pytest.raises(RuntimeError, match="captured keys for 0 of 2 layers"):
        iv.extra_loss(trainer.model)


def test_qk_align_reg_raises_alignment() -> None:
    _, reports = train(make_intervention("qk_align_reg", lam=5.0))
    align, align_none = layer_mean(reports[-1], "qk_alignment"), layer_mean(none_run()[1], "qk_alignment")
    assert align > align_none + 0.05, (align, align_none)
