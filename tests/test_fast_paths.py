"""The fast paths change no result (CPU).

- ``Trainer._train_epoch`` (on-device batches, q/k grad-norm bookkeeping,
  scaler, hooks) gives the same losses and weights as the plain reference
  loop of ``bench.train_step`` on the same model and batches;
- ``BatchSampler`` (windows gathered on the device) and ``fixed_windows``
  give the same windows as slicing the NumPy array at the same starts;
- ``probe_layers`` (batched over sequences and heads) gives the same rows as
  a naive float64 NumPy reference looping over layers, sequences and heads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.train_step import ReferenceLoop
from metrics.probe import probe_layers
from model.corpus import BatchSampler, fixed_windows, probe_batch
from model.train import TrainConfig, Trainer
from tests.helpers import CONTEXT, tiny_corpus, tiny_model, tiny_model_cfg

STEPS, BATCH, LR, SEED, MODEL_SEED = 6, 8, 3e-3, 11, 5


def _trainer(steps_per_epoch: int, qk_init: str = "independent_xavier") -> Trainer:
    cfg = TrainConfig(device="cpu", lr=LR, batch_size=BATCH, epochs=STEPS, steps_per_epoch=steps_per_epoch,
                      eval_batches=1, probe_seqs=2, seed=SEED)
    return Trainer(tiny_model_cfg(), cfg, tiny_corpus(), qk_init, MODEL_SEED)


def _reference(qk_init: str = "independent_xavier") -> ReferenceLoop:
    return ReferenceLoop(tiny_model_cfg(), tiny_corpus(), qk_init, MODEL_SEED, SEED, BATCH, LR)


@pytest.mark.parametrize("qk_init", ["independent_xavier", "qk_identical"])
def test_trainer_losses_and_weights_equal_the_plain_loop(qk_init: str) -> None:
    trainer, ref = _trainer(1, qk_init), _reference(qk_init)
    ours = [trainer._train_epoch()[0] for _ in range(STEPS)]  # one step per call: its own loss
    theirs = [ref.step().item() for _ in range(STEPS)]
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7)
    assert theirs[-1] < theirs[0]  # it trains
    for (name, p), q in zip(trainer.model.named_parameters(), ref.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)


def test_one_epoch_mean_loss_and_grad_norms() -> None:
    trainer, ref = _trainer(STEPS), _reference()
    loss, grad_norm, qk = trainer._train_epoch()
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


def test_batch_sampler_windows_equal_numpy_slicing() -> None:
    data = tiny_corpus().train
    sampler = BatchSampler(data, BATCH, CONTEXT, seed=SEED)
    gen = torch.Generator().manual_seed(SEED)  # the sampler's own stream, replayed
    for _ in range(4):
        x, y = sampler.next()
        starts = torch.randint(len(data) - CONTEXT, (BATCH,), generator=gen).numpy()
        windows = np.stack([np.asarray(data[s:s + CONTEXT + 1], dtype=np.int64) for s in starts])
        assert x.dtype == torch.int64 and tuple(x.shape) == (BATCH, CONTEXT)
        np.testing.assert_array_equal(x.numpy(), windows[:, :-1])
        np.testing.assert_array_equal(y.numpy(), windows[:, 1:])


def test_fixed_windows_equal_numpy_slicing() -> None:
    data = tiny_corpus().val
    x, y = fixed_windows(data, 5, CONTEXT, seed=3)
    starts = torch.randint(len(data) - CONTEXT, (5,), generator=torch.Generator().manual_seed(3)).numpy()
    windows = np.stack([np.asarray(data[s:s + CONTEXT + 1], dtype=np.int64) for s in starts])
    np.testing.assert_array_equal(x.numpy(), windows[:, :-1])
    np.testing.assert_array_equal(y.numpy(), windows[:, 1:])


# -- the probe against a naive float64 reference ------------------------------------------


def _erank(m: np.ndarray) -> float:
    s = np.linalg.svd(m, compute_uv=False)
    if s.sum() == 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def _pr(x: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(np.cov(x, rowvar=False))
    return float(lam.sum() ** 2 / (lam**2).sum())


def _naive_rows(model, tokens: torch.Tensor) -> list[dict[str, float]]:
    with torch.no_grad():
        _, _, traces = model.probe(tokens)
    rows = []
    for block, tr in zip(model.blocks, traces, strict=True):
        attn = block.attn
        H, dh = attn.n_head, attn.d_head
        wq = attn.q_proj.weight.detach().double().numpy()
        wk = attn.k_proj.weight.detach().double().numpy()
        x = tr.x.double().numpy()  # (B, T, D) attention input
        q = x @ wq.T + attn.q_proj.bias.detach().double().numpy()
        k = x @ wk.T + attn.k_proj.bias.detach().double().numpy()
        B, T, D = q.shape
        cols = {n: [] for n in ("qk_erank", "attn_entropy", "attn_top1", "attn_erank", "logit_std")}
        for b in range(B):
            for h in range(H):
                qh, kh = q[b, :, h * dh:(h + 1) * dh], k[b, :, h * dh:(h + 1) * dh]
                s = qh @ kh.T / math.sqrt(dh)
                a = np.zeros_like(s)
                ent, top = [], []
                for t in range(T):
                    z = np.exp(s[t, :t + 1] - s[t, :t + 1].max())
                    a[t, :t + 1] = z / z.sum()
                    nz = a[t, :t + 1][a[t, :t + 1] > 0]
                    ent.append(-(nz * np.log(nz)).sum())
                    top.append(a[t].max())
                cols["qk_erank"].append(_erank(s))
                cols["attn_erank"].append(_erank(a))
                cols["attn_entropy"].append(np.mean(ent))
                cols["attn_top1"].append(np.mean(top))
                cols["logit_std"].append(s[np.tril_indices(T)].std())
        pr_q, pr_k = _pr(q.reshape(B * T, D)), _pr(k.reshape(B * T, D))
        cos = [abs(wq[i] @ wk[i]) / (np.linalg.norm(wq[i]) * np.linalg.norm(wk[i])) for i in range(D)]
        rows.append({
            "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k,
            **{n: float(np.mean(v)) for n, v in cols.items()},
            "wq_erank": _erank(wq), "wk_erank": _erank(wk),
            "wq_erank_head": float(np.mean([_erank(wq[h * dh:(h + 1) * dh]) for h in range(H)])),
            "wk_erank_head": float(np.mean([_erank(wk[h * dh:(h + 1) * dh]) for h in range(H)])),
            "qk_alignment": float(np.mean(cos)),
            "wq_norm": float(np.linalg.norm(wq)), "wk_norm": float(np.linalg.norm(wk)),
        })
    return rows


def test_probe_rows_equal_a_naive_float64_reference() -> None:
    model = tiny_model("independent_xavier", seed=3)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move off the init so no column sits at a trivial value
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(3.0)
            block.attn.q_proj.bias.copy_(0.3 * torch.randn(block.attn.q_proj.bias.shape, generator=gen))
            block.attn.k_proj.bias.copy_(0.3 * torch.randn(block.attn.k_proj.bias.shape, generator=gen))
    tokens = probe_batch(tiny_corpus(), 3, CONTEXT)
    fast, naive = probe_layers(model, tokens), _naive_rows(model, tokens)
    assert len(fast) == len(naive) == model.cfg.n_layer
    for layer, (f, n) in enumerate(zip(fast, naive, strict=True)):
        assert f["layer"] == layer
        for col, want in n.items():
            # q, k are float32 in the model; the reference recomputes them in float64
            assert f[col] == pytest.approx(want, rel=1e-4, abs=1e-5), (layer, col)
