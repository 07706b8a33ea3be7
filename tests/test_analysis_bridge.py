"""analysis/bridge.py: the mechanism-bridge correlations against numpy's corrcoef."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis import vocabulary as vocab
from analysis.bridge import BRIDGE_PAIRS, BRIDGE_QUANTITIES
from analysis.compute import compute_all
from sweep.synthetic import (
    make_synthetic_store,
)

# ----------------------------------------------------------------------------
# bridge
# ----------------------------------------------------------------------------


def _hand_bridge(g: pd.DataFrame) -> dict[str, float]:
    out = {}
    for name, (m, sign) in BRIDGE_QUANTITIES.items():
        ref = sps.linregress(g["epoch"].astype(float), g[m])
        out[name] = sign * ref.slope / g[m].mean()
    return out


def test_bridge_pearson_equals_corrcoef(small):
    an = compute_all(small)
    base = small["layers"][small["layers"]["sweep"] == "baseline"]
    unc = base[base["init"].isin(vocab.uncoupled_inits())]
    per_seed = [_hand_bridge(g) for _, g in unc.groupby(["run_id", "layer"])]
    cells = []
    for _, g in unc.groupby(["init", "depth", "layer"]):
        trace = (
            g.groupby("epoch")[["pr_k", "qk_erank", "attn_entropy", "attn_top1"]]
            .mean()
            .reset_index()
        )
        cells.append(_hand_bridge(trace))
    for level, rows in (("per_seed", per_seed), ("seed_averaged", cells)):
        q = pd.DataFrame(rows)
        for a, b in BRIDGE_PAIRS:
            got = an.stats["bridge"][level][f"{a}__{b}"]
            r = np.corrcoef(q[a], q[b])[0, 1]
            assert got["r"] == pytest.approx(r, rel=1e-9)
            assert got["n"] == len(q)
            assert got["r"] > 0  # planted positive coupling
            assert 0 <= got["p"] < 0.05
    assert an.stats["bridge"]["seed_averaged"]["key_spec__qk_compression"]["n"] == 2 * 18
    assert an.stats["bridge"]["per_seed"]["key_spec__qk_compression"]["n"] == 2 * 18 * 3


def test_bridge_with_too_few_cells_does_not_crash():
    tb = make_synthetic_store(
        n_seeds=1,
        depths=(2,),
        epochs=4,
        inits=("independent_xavier",),
        interventions=False,
        checkpoints=False,
    )
    an = compute_all(tb)
    sa = an.stats["bridge"]["seed_averaged"]["key_spec__qk_compression"]
    assert sa["n"] == 2 and sa["r"] is None and sa["p"] is None
    assert "bridge.seed_averaged.key_spec__qk_compression" in an.stats["missing"]
