"""sweep/strengths.py (SPEC §5 dose–response), no Ray: ``--strengths`` parsing, its one-line errors
before Ray starts, the help generated from the registry, the cells and run ids it makes, and
λ = 0 built from a cell training exactly the ``none`` run."""

from __future__ import annotations

import pytest
import ray
from intervention_helpers import assert_params_equal, none_run, params, train

from interventions import make_intervention
from sweep import interventions
from sweep.presets import INTERVENTION_PRESETS, preset_from_args
from sweep.strengths import parse_strengths, strengths_help

DOSE = ("--conditions", "none,forced_k_contraction", "--strengths", "forced_k_contraction.lam=0,0.05,0.2")


def preset(*argv: str):
    return preset_from_args(interventions.parse(["--preset", "smoke", *argv]), INTERVENTION_PRESETS)


def test_each_strength_is_its_own_cell_and_the_default_keeps_its_run_id() -> None:
    p = preset(*DOSE)
    assert p.strengths == (("forced_k_contraction", "lam", (0.0, 0.05, 0.2)),)
    cells = p.cells()
    assert [(c.condition, c.strengths) for c in cells] == [
        ("none", ()), ("forced_k_contraction", (("lam", 0.0),)), ("forced_k_contraction", ()),
        ("forced_k_contraction", (("lam", 0.2),))]
    base = "interventions.smoke.independent_xavier.L2.s7"
    assert [c.run_id for c in cells] == [f"{base}.none", f"{base}.forced_k_contraction.lam0",
                                         f"{base}.forced_k_contraction", f"{base}.forced_k_contraction.lam0.2"]
    # the default cell is the one every store written before strengths could be swept holds
    plain = INTERVENTION_PRESETS["smoke"].cells()
    assert {c.run_id for c in plain} >= {f"{base}.none", f"{base}.forced_k_contraction"}
    assert [c.identity()["strengths"] for c in cells] == ["{}", '{"lam": 0.0}', '{"lam": 0.05}', '{"lam": 0.2}']


def test_flag_repeated_or_several_words() -> None:
    conds = ("none", "forced_k_contraction", "qk_align_reg")
    want = (("forced_k_contraction", "lam", (0.0, 0.1)), ("qk_align_reg", "lam", (0.0, 0.01)))
    assert parse_strengths([["forced_k_contraction.lam=0,0.1"], ["qk_align_reg.lam=0,0.01"]], conds) == want
    assert parse_strengths([["forced_k_contraction.lam=0,0.1", "qk_align_reg.lam=0,0.01"]], conds) == want


def test_help_lists_every_condition_field_with_its_default(capsys) -> None:
    text = strengths_help()
    assert "forced_k_contraction.lam=0.05" in text and "qk_align_reg.lam=0.001" in text
    assert "no strength: none, freeze_k, freeze_q, k_spectrum_clamp" in text
    with pytest.raises(SystemExit):
        interventions.parse(["--help"])
    assert "forced_k_contraction.lam=0.05" in " ".join(capsys.readouterr().out.split())


@pytest.fixture
def no_ray():
    if ray.is_initialized():
        ray.shutdown()
    yield
    assert not ray.is_initialized(), "Ray started although the input was bad"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--strengths", "typo_cond.lam=0,1"], "--strengths typo_cond.lam=0,1: unknown condition 'typo_cond'; "
     "conditions with strengths: forced_k_contraction.lam, qk_align_reg.lam"),
    (["--strengths", "forced_k_contraction.mu=1"], "--strengths forced_k_contraction.mu=1: forced_k_contraction "
     "has no field 'mu'; valid: forced_k_contraction.lam (default 0.05)"),
    (["--strengths", "forced_k_contraction.lam=0,-0.1"], "--strengths forced_k_contraction.lam=0,-0.1: a strength "
     "must be a finite number >= 0, got -0.1"),
    (["--strengths", "forced_k_contraction.lam=inf"], "a strength must be a finite number >= 0, got inf"),
    (["--strengths", "forced_k_contraction.lam=x"], "--strengths forced_k_contraction.lam=x: 'x' is not a number"),
    (["--strengths", "freeze_k.lam=1"], "--strengths freeze_k.lam=1: freeze_k has no strength; valid: "
     "forced_k_contraction.lam, qk_align_reg.lam"),
    (["--conditions", "none,freeze_k", "--strengths", "forced_k_contraction.lam=0,1"],
     "--strengths forced_k_contraction.lam=0,1: forced_k_contraction is not among the sweep's conditions "
     "(none, freeze_k); add it to --conditions"),
    (["--strengths", "lam=0.1"], "--strengths 'lam=0.1': expected CONDITION.FIELD=V1,V2,..."),
    (["--strengths", "forced_k_contraction.lam=0.1,0.1"], "a value is repeated"),
    (["--strengths", "forced_k_contraction.lam=0", "--strengths", "forced_k_contraction.lam=1"],
     "forced_k_contraction.lam is given twice"),
], ids=["condition", "field", "negative", "inf", "not-a-number", "no-strength", "not-in-conditions",
        "syntax", "repeated", "twice"])
def test_bad_strengths_are_one_line_and_exit_2_before_ray(no_ray, tmp_path, capsys, argv, needle) -> None:
    with pytest.raises(SystemExit) as err:
        interventions.main(["--preset", "smoke", *argv, "--store", str(tmp_path / "store"),
                            "--storage", str(tmp_path / "ray")])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m sweep.interventions: error: --strengths")
    assert needle in lines[0]
    assert not (tmp_path / "ray").exists() and not (tmp_path / "store").exists()


def test_zero_strength_from_a_cell_trains_the_none_run(one_thread) -> None:
    """trial.py's ``make_intervention(spec.condition, **spec.strengths)`` at λ = 0: no hook, no
    extra term, the same weights and losses as the matched ``none`` run, bit for bit."""
    (cell,) = [c for c in preset(*DOSE).cells() if c.strengths == (("lam", 0.0),)]
    iv = make_intervention(cell.condition, **dict(cell.strengths))
    assert iv.lam == 0.0
    trainer, reports = train(iv)
    assert not iv._handles and iv.extra_loss(trainer.model) is None
    assert_params_equal(params(trainer), none_run()[0])
    assert reports[-1].run["train_loss"] == none_run()[1].run["train_loss"]
    assert reports[-1].layers == none_run()[1].layers
