"""``python -m sweep.baseline --seeds auto``'s family: the scorecard's counted baseline claims, each
decided on the per-seed statistics the scorecard itself computes (SPEC §8). No Ray.

* ``baseline_family``: the claims a baseline grid measures, fixed before any run: the counted
  claims (not a sanity check, not a magnitude row, not Appendix A's series, tested over seeds)
  that ``analysis.scorecard.all_claims`` measures on a synthetic store of the grid (the preset's
  inits and depths, no effect: ``sweep.synthetic.effects``). Which claims a grid measures depends
  on its inits and depths, never on the runs' values.
* ``claims_at``: at a look, the scorecard's ``Claim`` objects on the store's runs of exactly the
  look's seeds (``analysis.compute.compute_all`` then ``all_claims``): each claim's ``y`` [n seeds]
  (and ``y_against``, ``fisher``) is what the scorecard would test on those seeds.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from sweep.presets import Cell, Preset
from sweep.sequential_state import Claim, GridUnit

#: The final-epoch layer metrics a baseline run must have finite to be complete (the baseline
#: claims' inputs: alignment, the participation ratios, the bridge's and categories' metrics).
BASELINE_FINAL_METRICS = ("qk_alignment", "pr_q", "pr_k", "pr_q_minus_pr_k", "qk_erank", "attn_entropy", "attn_top1")
#: Seeds and epochs of the synthetic store that lists a grid's claims (what a claim needs is the
#: grid's inits and depths, and two epochs for a slope).
FAMILY_SEEDS, FAMILY_EPOCHS = 3, 2


def counted(c) -> bool:
    """A scorecard claim ``--seeds auto`` decides: counted, measured, over seeds, by a t-test."""
    return (c.reason is None and not c.sanity and c.expect.sign != 0 and c.unit == "seeds" and c.test == "t"
            and c.y is not None)


def baseline_family(preset: Preset) -> tuple[Claim, ...]:
    """The baseline claims of ``preset``'s grid, in the scorecard's order (module docstring)."""
    return _family(preset.name, preset.inits, preset.depths)


@functools.lru_cache(maxsize=8)
def _family(name: str, inits: tuple[str, ...], depths: tuple[int, ...]) -> tuple[Claim, ...]:
    from analysis.compute import compute_all
    from analysis.scorecard import all_claims
    from sweep.synthetic.effects import make_effect_store

    tables = make_effect_store(None, seeds=tuple(range(FAMILY_SEEDS)), depths=depths, epochs=FAMILY_EPOCHS,
                               iv_seeds=(0,), iv_epochs=1, preset=name)
    keep = {k: v[(v["sweep"] == "baseline") & v["init"].isin(inits)] if "sweep" in v else v for k, v in tables.items()}
    with warnings.catch_warnings():  # a few seeds and epochs: empty slices in statistics not used here
        warnings.simplefilter("ignore", RuntimeWarning)
        claims = all_claims(compute_all(keep, preset=name), name == "paper")
    unit = GridUnit(name)
    return tuple(Claim(unit, c.id, int(c.expect.sign), c.id, c.y_against is not None, bool(c.fisher),
                       float(c.expect.lo)) for c in claims if counted(c))


def grid_cells(preset: Preset, seeds: tuple[int, ...]) -> list[Cell]:
    return replace(preset, seeds=tuple(seeds)).cells()


def final_baseline(layers: pd.DataFrame, epochs: pd.DataFrame, preset: Preset) -> dict[str, dict[str, float]]:
    """The complete baseline runs of ``preset``: their final epoch (``preset.train.epochs``) in the
    store with every layer's ``BASELINE_FINAL_METRICS`` finite, not diverged. Run id -> {} (a
    baseline claim reads the store, not these)."""
    if layers.empty:
        return {}
    rows = layers[(layers["preset"] == preset.name) & (layers["epoch"] == preset.train.epochs)]
    cols = [m for m in BASELINE_FINAL_METRICS if m in rows.columns]
    ok = rows.groupby("run_id")[cols].apply(lambda g: bool(np.isfinite(g.to_numpy(float)).all()))
    diverged = set(epochs.loc[epochs["status"] == "diverged", "run_id"]) if not epochs.empty else set()
    return {rid: {} for rid, good in ok.items() if good and rid not in diverged}


def claims_at_factory(layers: pd.DataFrame, epochs: pd.DataFrame, preset: Preset
                      ) -> Callable[[tuple[int, ...]], dict]:
    """``claims_at(seeds)``: the scorecard's claims (by id) on the runs of the grid at ``seeds`` only."""
    from analysis.compute import compute_all
    from analysis.scorecard import all_claims

    def claims_at(seeds: tuple[int, ...]) -> dict:
        ids = {c.run_id for c in grid_cells(preset, seeds)}
        tables = {"layers": layers[layers["run_id"].isin(ids)], "epochs": epochs[epochs["run_id"].isin(ids)]}
        with warnings.catch_warnings():  # the scorecard's statistics on few seeds (NaN where undefined)
            warnings.simplefilter("ignore", RuntimeWarning)
            return {c.id: c for c in all_claims(compute_all(tables, preset=preset.name), preset.name == "paper")}

    return claims_at
