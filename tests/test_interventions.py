"""Interventions (SPEC §5): each condition's mechanism, its λ = 0 identity with ``none``,
checkpoint/resume bit-identity, and the errors of ``make_intervention``."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import cache

import numpy as np
import pytest
import torch

import interventions
from interventions import REGISTRY, Intervention, make_intervention
from interventions.regularisers import participation_ratio_f32, qk_cos_loss
from metrics.spectra import participation_ratio
from model.corpus import Corpus
from model.gpt import GPTConfig
from model.train import EpochReport, TrainConfig, Trainer

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "freeze_q", "qk_align_reg")
SEED = 3
EPOCHS, STEPS = 3, 8


@cache
def tiny_corpus() -> Corpus:
    """Random 'sentences' over a small word list: learnable structure, ~25k characters."""
    rng = np.random.default_rng(0)
    words = ["the", "key", "query", "attends", "to", "a", "sharp", "broad", "head", "layer", "of"]
    text = " ".join(rng.choice(words, size=5000)) + "."
    vocab = "".join(sorted(set(text)))
    ids = np.array([vocab.index(c) for c in text], dtype=np.uint16)
    split = int(0.9 * len(ids))
    return Corpus("tiny-words", vocab, ids[:split], ids[split:])


def model_cfg() -> GPTConfig:
    return GPTConfig(vocab_size=tiny_corpus().vocab_size, n_layer=2, n_head=2, d_model=32,
                     d_mlp=64, context=16)


def train_cfg() -> TrainConfig:
    return TrainConfig(lr=3e-3, batch_size=8, epochs=EPOCHS, steps_per_epoch=STEPS, device="cpu",
                       eval_batches=2, probe_seqs=4, seed=SEED)


def make_trainer(iv: Intervention, model_seed: int = SEED) -> Trainer:
    return Trainer(model_cfg(), train_cfg(), tiny_corpus(), "independent_xavier", model_seed, iv)


def train(iv: Intervention, on_epoch: Callable[[Trainer, EpochReport], None] | None = None
          ) -> tuple[Trainer, list[EpochReport]]:
    """A full run; ``on_epoch(trainer, report)`` is called at epoch 0 and after every epoch."""
    trainer = make_trainer(iv)
    reports: list[EpochReport] = []

    def record(report: EpochReport) -> None:
        reports.append(report)
        if on_epoch is not None:
            on_epoch(trainer, report)

    assert trainer.run(record) == "completed"
    return trainer, reports


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def assert_params_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    differ = [n for n in a if not torch.equal(a[n], b[n])]
    assert not differ, f"parameters differ: {differ}"


def layer_mean(report: EpochReport, column: str) -> float:
    return float(np.mean([row[column] for row in report.layers]))


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread (and do not fight other jobs for cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@cache
def none_run() -> tuple[dict[str, torch.Tensor], EpochReport]:
    """The matched ``none`` run (same seed and init): final parameters and final report."""
    trainer, reports = train(Intervention())
    return params(trainer), reports[-1]


# -- registry and errors --------------------------------------------------------


def test_every_condition_registered_with_predictions() -> None:
    assert set(CONDITIONS) <= set(REGISTRY)
    for name in CONDITIONS:
        iv = make_intervention(name)
        assert iv.name == name and isinstance(iv, Intervention)
        assert set(iv.predicted.values()) <= {-1, +1}
        assert set(iv.predicted) <= {"attn_entropy", "logit_std", "qk_erank"}
    assert REGISTRY["forced_k_contraction"].predicted == {"attn_entropy": -1, "logit_std": +1, "qk_erank": -1}
    for name in ("k_spectrum_clamp", "freeze_k"):
        assert REGISTRY[name].predicted == {"attn_entropy": +1, "logit_std": -1, "qk_erank": +1}
    assert REGISTRY["freeze_q"].predicted == {"attn_entropy": +1}
    assert REGISTRY["qk_align_reg"].predicted == {}
    assert make_intervention("forced_k_contraction").config() == {"lam": 0.05}
    assert make_intervention("qk_align_reg").config() == {"lam": 1e-3}
    assert {"ForcedKContraction", "KSpectrumClamp", "FreezeK", "FreezeQ", "QKAlignReg"} <= set(interventions.__all__)


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'forced_q_contraction'"):
        make_intervention("forced_q_contraction")


def test_unknown_strength_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="lambda_"):
        make_intervention("forced_k_contraction", lambda_=0.1)
    with pytest.raises(ValueError, match="lam"):
        make_intervention("freeze_k", lam=1.0)


@pytest.mark.parametrize("name", ["forced_k_contraction", "qk_align_reg"])
def test_negative_strength_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"lam.*-0\.5"):
        make_intervention(name, lam=-0.5)


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


# -- extra-loss conditions ----------------------------------------------------------


@pytest.mark.parametrize("name", ["forced_k_contraction", "qk_align_reg"])
def test_zero_strength_is_bit_identical_to_none(name: str) -> None:
    iv = make_intervention(name, lam=0.0)
    trainer, _ = train(iv)
    assert_params_equal(params(trainer), none_run()[0])
    assert not getattr(iv, "_handles", [])  # λ = 0 registers no hooks


def test_forced_k_contraction_lowers_pr_k() -> None:
    _, reports = train(make_intervention("forced_k_contraction", lam=20.0))
    pr_k, pr_k_none = layer_mean(reports[-1], "pr_k"), layer_mean(none_run()[1], "pr_k")
    assert pr_k < pr_k_none - 1.0, (pr_k, pr_k_none)


def test_forced_k_contraction_needs_a_training_forward() -> None:
    iv = make_intervention("forced_k_contraction")
    trainer = make_trainer(iv)
    trainer.val_loss()  # a no-grad eval pass must not leave captures behind
    with pytest.raises(RuntimeError, match="captured keys for 0 of 2 layers"):
        iv.extra_loss(trainer.model)


def test_qk_align_reg_raises_alignment() -> None:
    _, reports = train(make_intervention("qk_align_reg", lam=5.0))
    align, align_none = layer_mean(reports[-1], "qk_alignment"), layer_mean(none_run()[1], "qk_alignment")
    assert align > align_none + 0.05, (align, align_none)


# -- checkpoint / resume ------------------------------------------------------------


class _Stop(Exception):
    pass


STRONG = {"forced_k_contraction": {"lam": 5.0}, "qk_align_reg": {"lam": 1.0}}


@pytest.mark.parametrize("name", CONDITIONS)
def test_resume_is_bit_identical(name: str) -> None:
    strengths = STRONG.get(name, {})
    uninterrupted, _ = train(make_intervention(name, **strengths))

    first = make_trainer(make_intervention(name, **strengths))

    def stop(report: EpochReport) -> None:
        if report.epoch == 1:
            raise _Stop

    with pytest.raises(_Stop):
        first.run(stop)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)
    del first

    # another model seed: whatever setup() derives from the initial weights (σ⁽⁰⁾) must come from the state
    resumed = make_trainer(make_intervention(name, **strengths), model_seed=SEED + 1)
    resumed.load_state_dict(state)
    assert resumed.epoch == 1 and resumed.step == STEPS
    assert resumed.run() == "completed"
    assert_params_equal(params(resumed), params(uninterrupted))
