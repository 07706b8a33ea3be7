"""analysis/interventions.py: Table 5's paired differences and confidence, against hand counts on planted stores."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import vocabulary as vocab
from analysis.compute import compute_all
from sweep.synthetic import (
    Planted,
    make_synthetic_store,
)

# ----------------------------------------------------------------------------
# interventions (Table 5)
# ----------------------------------------------------------------------------


def _hand_confidence(planted: Planted, n_seeds: int) -> dict[str, tuple[float, dict[str, float]]]:
    flips = {(c, i, m) for c, i, m in planted.violations}
    out = {}
    for cond in vocab.conditions():
        pred = vocab.predicted(cond)
        if not pred:
            continue
        by_metric = {
            m: sum((cond, i, m) not in flips for i in range(n_seeds)) / n_seeds for m in pred
        }
        allhold = (
            sum(all((cond, i, m) not in flips for m in pred) for i in range(n_seeds)) / n_seeds
        )
        out[cond] = (allhold, by_metric)
    return out


@pytest.mark.parametrize(
    "violations",
    [
        Planted().violations,
        (
            ("freeze_k", 4, "logit_std"),
            ("freeze_k", 4, "qk_erank"),
            ("freeze_k", 2, "attn_entropy"),
            ("forced_k_contraction", 0, "pr_k"),
        ),  # pr_k has no predicted direction: no effect
    ],
)
def test_confidence_equals_hand_count(violations):
    planted = Planted(violations=violations)
    tb = make_synthetic_store(n_seeds=1, depths=(4,), epochs=3, planted=planted, checkpoints=False)
    an = compute_all(tb)
    iv = an.stats["interventions"]
    assert an.stats["interventions_init"] == "independent_xavier"
    assert "interventions_by_init" not in an.stats
    hand = _hand_confidence(planted, 5)
    for cond, (conf, by) in hand.items():
        assert iv[cond]["confidence"] == pytest.approx(conf), cond
        assert iv[cond]["confidence_by_metric"] == pytest.approx(by), cond
        assert iv[cond]["n_pairs"] == 5
    assert iv["qk_align_reg"]["confidence"] is None
    assert iv["none"]["confidence"] is None
    assert iv["none"]["confidence_by_metric"] is None
    # the deltas: mean over seeds of the signed planted effect
    flips = {(c, i, m) for c, i, m in violations}
    for cond, eff in planted.effects.items():
        for m, d in eff.items():
            exp = np.mean([-d if (cond, i, m) in flips else d for i in range(5)])
            assert iv[cond][m]["delta"] == pytest.approx(exp, abs=1e-9), (cond, m)


def test_intervention_means_and_pairing_by_hand(small):
    # row order must not matter: shuffle every table before reducing
    shuffled = {k: v.sample(frac=1.0, random_state=3) for k, v in small.items()}
    an = compute_all(shuffled)
    lay = small["layers"][small["layers"]["sweep"] == "interventions"]
    ep = small["epochs"][small["epochs"]["sweep"] == "interventions"]
    fin = lay[lay["epoch"] == lay["epoch"].max()]
    per_run = fin.groupby(["condition", "seed"])["attn_entropy"].mean()
    vl = ep[ep["epoch"] == ep["epoch"].max()].set_index(["condition", "seed"])["val_loss"]
    iv = an.stats["interventions"]
    for cond in vocab.conditions():
        vals = per_run.loc[cond]
        assert iv[cond]["attn_entropy"]["mean"] == pytest.approx(vals.mean())
        assert iv[cond]["attn_entropy"]["sd"] == pytest.approx(vals.std(ddof=1))
        diffs = vals - per_run.loc["none"].reindex(vals.index)
        assert iv[cond]["attn_entropy"]["delta"] == pytest.approx(diffs.mean(), abs=1e-12)
        assert iv[cond]["val_loss"]["mean"] == pytest.approx(vl.loc[cond].mean())


def test_exact_zero_effect_does_not_count_as_a_direction():
    planted = Planted(violations=())
    planted.effects["freeze_q"]["attn_entropy"] = 0.0  # no change: neither up nor down
    tb = make_synthetic_store(
        n_seeds=1, depths=(4,), epochs=2, planted=planted, baseline=False, checkpoints=False
    )
    iv = compute_all(tb).stats["interventions"]
    assert iv["freeze_q"]["attn_entropy"]["delta"] == pytest.approx(0.0, abs=1e-12)
    assert iv["freeze_q"]["confidence"] == 0.0
    assert iv["freeze_k"]["confidence"] == 1.0


def test_interventions_several_inits_and_missing_none():
    tb = make_synthetic_store(
        n_seeds=1,
        depths=(4,),
        epochs=3,
        iv_epochs=3,
        checkpoints=False,
        iv_inits=("qk_identical", "independent_xavier"),
    )
    an = compute_all(tb)
    assert an.stats["interventions_init"] == "independent_xavier"
    assert set(an.stats["interventions_by_init"]) == {"qk_identical", "independent_xavier"}
    assert an.stats["interventions_by_init"]["independent_xavier"] == an.stats["interventions"]
    # drop every `none` run: values remain, deltas and confidence become null
    lay = tb["layers"]
    tb2 = dict(
        tb,
        layers=lay[lay["condition"] != "none"],
        epochs=tb["epochs"][tb["epochs"]["condition"] != "none"],
    )
    s = compute_all(tb2).stats
    assert s["interventions"]["freeze_k"]["attn_entropy"]["mean"] is not None
    assert s["interventions"]["freeze_k"]["attn_entropy"]["delta"] is None
    assert s["interventions"]["freeze_k"]["confidence"] is None
    assert "interventions.delta" in s["missing"]
