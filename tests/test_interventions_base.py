"""interventions/base.py: the registry and its errors, and what every condition must keep: lambda = 0 is the control bit for bit, and a resume is bit-identical."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from intervention_helpers import (
    CONDITIONS,
    SEED,
    STEPS,
    assert_params_equal,
    make_trainer,
    none_run,
    params,
    train,
)

import interventions
from interventions import REGISTRY, Intervention, make_intervention
from model.report import EpochReport

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


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


def test_the_registry_loads_without_torch() -> None:
    """A parser reads the registry (the presets, --conditions, --strengths): importing the package, every
    condition's module included, and building a condition must not import torch (a fresh interpreter;
    this one has torch already). Each condition imports torch when it computes."""
    code = ("import sys, interventions\n"
            "ivs = [interventions.make_intervention(n) for n in interventions.PAPER_CONDITIONS]\n"
            "print(len(interventions.REGISTRY), interventions.default_strengths('forced_k_contraction'), "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == f"{len(CONDITIONS)} {{'lam': 0.05}} False"


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


# -- extra-loss conditions ----------------------------------------------------------


@pytest.mark.parametrize("name", ["forced_k_contraction", "qk_align_reg"])
def test_zero_strength_is_bit_identical_to_none(name: str) -> None:
    iv = make_intervention(name, lam=0.0)
    trainer, _ = train(iv)
    assert_params_equal(params(trainer), none_run()[0])
    assert not getattr(iv, "_handles", [])  # λ = 0 registers no hooks


# -- checkpoint / resume ------------------------------------------------------------


class _Stop(Exception):
    pass


STRONG = {"forced_k_contraction": {"lam": 5.0}, "qk_align_reg": {"lam": 1.0}}


@pytest.mark.parametrize("name", CONDITIONS)
def test_resume_is_bit_identical(name: str) -> None:
    strengths = STRONG.get(name, {})
    uninterrupted, _ = train(make_intervention(name, **strengths))

    first = make_trainer(make_intervention(name, **strengths))

    def stop(_: int, report: EpochReport) -> None:
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
    assert resumed.run() == ["completed"]
    assert_params_equal(params(resumed), params(uninterrupted))
