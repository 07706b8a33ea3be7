"""model/trainer.py's fast path changes no result (CPU): ``Trainer.train_epoch`` (on-device batches,
q/k grad-norm bookkeeping, scaler, hooks) gives the same losses and weights as the plain
reference loop of ``bench.train_step`` on the same model and batches.

(A second file for model/trainer.py: its constants differ from test_model_trainer.py's.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_corpus, tiny_model_cfg

from bench.train_step import ReferenceLoop
from model.recipe import TrainConfig
from model.stack import Member
from model.trainer import Trainer

STEPS, BATCH, LR, SEED, MODEL_SEED = 6, 8, 3e-3, 11, 5


def _trainer(steps_per_epoch: int, qk_init: str = "independent_xavier") -> Trainer:
    cfg = TrainConfig(device="cpu", lr=LR, batch_size=BATCH, epochs=STEPS, steps_per_epoch=steps_per_epoch,
                      eval_batches=1, probe_seqs=2, seed=SEED)
    return Trainer(tiny_model_cfg(), [Member(qk_init, MODEL_SEED, cfg)], tiny_corpus())


def _reference(qk_init: str = "independent_xavier") -> ReferenceLoop:
    return ReferenceLoop(tiny_model_cfg(), tiny_corpus(), qk_init, MODEL_SEED, SEED, BATCH, LR)


@pytest.mark.parametrize("qk_init", ["independent_xavier", "qk_identical"])
def test_trainer_losses_and_weights_equal_the_plain_loop(qk_init: str) -> None:
    trainer, ref = _trainer(1, qk_init), _reference(qk_init)
    ours = [trainer.train_epoch()[0].loss for _ in range(STEPS)]  # one step per call: its own loss
    theirs = [ref.step().item() for _ in range(STEPS)]
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7)
    assert theirs[-1] < theirs[0]  # it trains
    for (name, p), q in zip(trainer.model.named_parameters(), ref.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)


def test_one_epoch_mean_loss_and_grad_norms() -> None:
    trainer, ref = _trainer(STEPS), _reference()
    loss, grad_norm, qk, skipped = trainer.train_epoch()[0]
    assert skipped == 0  # no loss scaling on the CPU
    losses, norms, qk_norms = [], [], []
    for _ in range(STEPS):  # the reference step, spelled out to read the norms
        x, y = ref.sampler.next()
        _, l_ = ref.model(x, y)
        l_.backward()
        qk_norms.append([p.grad.norm().item() for b in ref.model.blocks
                         for p in (b.attn.q_proj.weight, b.attn.k_proj.weight)])
        norms.append(torch.nn.utils.clip_grad_norm_(ref.params, 1.0).item())
        ref.opt.step()
        ref.opt.zero_grad(set_to_none=True)
        losses.append(l_.item())
    assert loss == pytest.approx(float(np.mean(losses)), rel=1e-6)
    assert grad_norm == pytest.approx(float(np.mean(norms)), rel=1e-6)
    np.testing.assert_allclose(qk.numpy(), np.mean(qk_norms, axis=0).reshape(-1, 2), rtol=1e-6)
