"""interventions/spectrum.py: the K spectrum clamp fixes the singular values every step and restores sigma0 from its state."""

from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace

import pytest
import torch
from intervention_helpers import (
    EPOCHS,
    SEED,
    STEPS,
    OldKSpectrumClamp,
    make_trainer,
    model_cfg,
    none_run,
    tiny_corpus,
    train,
    train_cfg,
)

from interventions import Intervention, make_intervention, spectrum
from interventions.spectrum import METHODS, KSpectrumClamp, choose, chosen, clamp_spectrum, fastest
from model.report import EpochReport
from model.stack import Member
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


# -- the batched clamp against the clamp before it (one SVD per layer batch) ------


class _Compared(OldKSpectrumClamp):
    """The old clamp, which also runs ``clamp_spectrum`` with every method on the very weights it
    clamps, and keeps each method's largest difference from its own result over the run."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.worst = dict.fromkeys(METHODS, 0.0)
        self.steps = 0

    @torch.no_grad()
    def after_step(self, model: torch.nn.Module) -> None:
        w = torch.stack(self._weights(model)).detach().clone()
        super().after_step(model)
        u, _, vh = torch.linalg.svd(w.double(), full_matrices=False)
        want = (u * self.sigma0[:, None, :]) @ vh  # the old clamp before the cast back to float32
        for method in METHODS:
            got = clamp_spectrum(w, self.sigma0, method)
            self.worst[method] = max(self.worst[method], (got - want).abs().max().item())
        self.steps += 1


@pytest.mark.parametrize("init", ["independent_xavier", "disjoint_support_xavier"])
def test_the_batched_clamp_gives_the_old_clamp_at_every_step_of_600(init: str) -> None:
    """600 steps of the tiny model under the old clamp; at every step each method, given the same
    W_K, lands within 1e-6 of the old clamp's float64 result (disjoint_support_xavier: W_K of rank
    D/2, σ⁽⁰⁾ half zeros). (Two whole runs, one per clamp, do
    not stay that close: where two current singular values nearly meet, U·diag(σ⁽⁰⁾)·Vᵀ turns
    on rounding, and AdamW carries any difference on; LOG.md, the clamp batched and priced.)"""
    iv = _Compared()
    trainer = Trainer(model_cfg(), [Member(init, SEED, dataclasses.replace(train_cfg(), epochs=2, steps_per_epoch=300))],
                      tiny_corpus(), lambda: iv)
    assert trainer.run() == ["completed"]
    assert iv.steps == 600
    assert all(v <= 1e-6 for v in iv.worst.values()), iv.worst
    assert iv.worst["svd"] == 0.0  # the same computation as the clamp before


def test_a_pack_is_clamped_in_one_decomposition_call(monkeypatch) -> None:
    """M = 3 members × 2 layers: one eigh call for all six matrices, each member's values those of
    the old per-member clamp, and a member with a non-finite W_K left as it is."""
    torch.manual_seed(0)
    k, layers, d = 3, 2, 16
    weights = [torch.randn(k, d, d) / 4 for _ in range(layers)]
    members = []
    for i in range(k):
        iv = make_intervention("k_spectrum_clamp")
        iv.setup(SimpleNamespace(blocks=[SimpleNamespace(attn=SimpleNamespace(k_proj=SimpleNamespace(weight=w[i])))
                                         for w in weights]))
        members.append(iv)
    moved = [w + 0.01 * torch.randn_like(w) for w in weights]
    moved[1][2, 0, 0] = float("nan")  # member 2, layer 1
    params = {f"blocks.{layer}.attn.k_proj.weight": moved[layer].clone() for layer in range(layers)}
    calls = []
    eigh = torch.linalg.eigh
    monkeypatch.setattr(torch.linalg, "eigh", lambda a, *args, **kw: calls.append(a.shape) or eigh(a, *args, **kw))
    KSpectrumClamp.after_step_packed(members, params, [SimpleNamespace(blocks=[None] * layers)] * k)
    assert calls == [torch.Size([k, layers, d, d])]
    for i, iv in enumerate(members):
        finite = 1 if i == 2 else layers  # member 2's layer 1 is not finite
        u, _, vh = torch.linalg.svd(torch.stack([m[i] for m in moved[:finite]]).double(), full_matrices=False)
        want = (u * iv.sigma0[:finite, None, :]) @ vh  # the old clamp, member by member
        got = torch.stack([params[f"blocks.{layer}.attn.k_proj.weight"][i] for layer in range(layers)])
        torch.testing.assert_close(got[:finite], want.float(), rtol=1e-5, atol=1e-6)
    assert torch.equal(params["blocks.1.attn.k_proj.weight"][2].nan_to_num(7.0), moved[1][2].nan_to_num(7.0))


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown method 'qr'; valid: eigh, svd, refine"):
        clamp_spectrum(torch.eye(2), torch.ones(2), "qr")


def test_at_paper_width_every_method_is_the_svd_clamp(monkeypatch) -> None:
    """Three 256×256 Xavier W_K (one of rank 128) one AdamW-sized step from their σ⁽⁰⁾: each method within 1e-8 of the
    SVD clamp; the float32 eigh alone, unrefined, is not (the refinement is what makes it float64)."""
    import interventions.spectrum as spectrum

    g = torch.Generator().manual_seed(1)
    w0 = torch.nn.init.xavier_uniform_(torch.empty(3, 256, 256), generator=g)
    w0[2, :, torch.randperm(256, generator=g)[:128]] = 0  # rank 128, as disjoint_support_xavier's
    sigma0 = torch.linalg.svdvals(w0.double())
    w = w0 + 1e-3 * torch.randn(w0.shape, generator=g)
    want = clamp_spectrum(w, sigma0, "svd")
    err = {m: (clamp_spectrum(w, sigma0, m) - want).abs().max().item() for m in METHODS}
    assert max(err.values()) < 1e-8, err
    # at initialisation a rank-deficient W_K is exactly so: σ = 0 where σ⁽⁰⁾ is rounding noise
    want0 = clamp_spectrum(w0, sigma0, "svd")
    err0 = {m: (clamp_spectrum(w0, sigma0, m) - want0).abs().max().item() for m in METHODS}
    assert max(err0.values()) < 1e-8, err0
    monkeypatch.setattr(spectrum, "REFINE_STEPS", 0)
    assert (clamp_spectrum(w, sigma0, "refine") - want).abs().max().item() > 1e-8


def test_the_clamp_chooses_its_decomposition_once_by_timing_off_the_cpu(monkeypatch) -> None:
    """``auto`` (the default): on the CPU eigh there, never timed; on another device the fastest of
    every method on both devices, timed once and kept (a fake timer on the meta device here; the real
    timing on a GPU is bench/gpu.sh's and tests/test_model_graphs_cuda.py's)."""
    assert KSpectrumClamp.method == KSpectrumClamp.decomp_device == "auto"
    monkeypatch.setattr(spectrum, "_AUTO_CHOICE", {})
    monkeypatch.setattr(spectrum, "_seconds", lambda *a: pytest.fail("timed on the CPU"))
    w = torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sigma0 = torch.linalg.svdvals(w)
    assert choose(w, sigma0) == ("eigh", None) and choose(w, sigma0, "svd", "cpu") == ("svd", "cpu")
    seconds = {("eigh", None): 3.0, ("eigh", "cpu"): 2.0, ("svd", None): 5.0, ("svd", "cpu"): 4.0,
               ("refine", None): 1.0, ("refine", "cpu"): 6.0}
    timed: list[tuple[str, str | None, int]] = []
    monkeypatch.setattr(spectrum, "_seconds",
                        lambda sample, s, m, p: timed.append((m, p, len(sample))) or seconds[(m, p)])
    meta = w.to("meta")
    assert choose(meta, sigma0) == ("refine", None) and chosen("meta") == ("refine", None)
    assert sorted((m, str(p)) for m, p, _ in timed) == sorted((m, str(p)) for m, p in seconds)
    assert {n for *_, n in timed} == {6}  # the run's own matrices, at most CALIBRATION_MATRICES of them
    assert choose(meta, sigma0) == ("refine", None) and len(timed) == 6  # kept for the process
    assert choose(meta, sigma0, place="cpu") == ("eigh", "cpu")  # the method chosen, the device set
    assert choose(meta, sigma0, "svd", None) == ("svd", None)  # both set: no timing
    assert len(timed) == 6 + 3


def test_the_timed_choice_is_a_candidate_and_the_same_clamp() -> None:
    w = torch.randn(4, 24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    sigma0 = torch.linalg.svdvals(w) * 0.9
    method, place = fastest(w, sigma0, [(m, None) for m in METHODS])
    assert method in METHODS and place is None
    torch.testing.assert_close(clamp_spectrum(w, sigma0, method, place), clamp_spectrum(w, sigma0, "svd"),
                               rtol=0, atol=1e-6)
