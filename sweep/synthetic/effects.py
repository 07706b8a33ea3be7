"""Stores with a chosen effect for each scorecard claim, and none elsewhere (SPEC §8): what
``bench/verdicts.py`` measures error rates and power on, and what the scorecard's tests falsify
claims with.

``make_effect_store(effects)`` builds a store of the demo's grid (or any) where every per-seed
statistic a counted claim tests varies from seed to seed around the value ``effects`` gives that
claim, in the claim's own units, and around "no effect" for a claim ``effects`` does not name:

* alignment: every init ends at the random draw's initial alignment (``RANDOM_START``), plus
  ``alignment.final.independent_xavier`` for the independent init, ``alignment.contrast`` for the
  coupled one, ``alignment.gap.L<d>`` for the coupled one at depth d, ``alignment.gap.growth``
  times the depth's rank from 0 (shallowest) to 1 (deepest) for the coupled one. The inits that
  start at a bound relax from it (their sanity checks);
* slopes: each layer trajectory's pr_q − pr_k slope is ``slopes.pr_q_minus_pr_k`` on average, its
  pr_k slope ``slopes.pr_k`` (per epoch);
* layer categories: ``categories.late_mid.<m>`` is added to m in late layers, ``categories.early_mid.<m>``
  to m in early layers (final values);
* bridge: ``bridge.<pair>`` is the correlation (in [−0.95, 0.95]) planted between the pair's two
  quantities across a seed's trajectories;
* interventions: ``interventions.<condition>.<metric>`` is added to that condition's final value
  over its seed's ``none`` run (the Δ of one seed share that run: positively dependent claims);
* checkpoints: ``n_series`` public series; ``checkpoints.positive`` and ``checkpoints.link`` are
  the probability that a series has a positive pr_q − pr_k slope on progress / a recurring link.

Effects of *another* factor, which no claim should read as its own (SPEC §8):

* ``depth.<metric>`` (``qk_erank``, ``attn_entropy``, ``pr_q``) adds value × L to that final metric
  in every layer of an L-layer model: a pure depth effect, no effect of a layer's position;
* ``spread.alignment.L<d>`` multiplies the final alignment's run-to-run sd at depth d (unequal
  spreads, under which a max over inits is biased).

``noise`` draws every deviation: ``"normal"``, ``"t3"`` (Student t with 3 degrees of freedom,
scaled to unit variance: heavy tails), ``"skewed"`` (a centred exponential, mean 0), ``"uniform"``
(light tails) or ``"bimodal"`` (±1 with equal odds plus N(0, 0.3²), scaled to unit variance: some
seeds one way, some the other). A run's deviation is shared by its layers (the layers of one run
are dependent). The tables have the store schema's columns (``sweep.synthetic.tables``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.frames import layer_category
from interventions import CONTROL
from model.qk_init import DEFAULT_INIT, QK_INITS
from sweep.presets import CONFIRMATORY_SEEDS, DEMO_DEPTHS
from sweep.store.schema import SCHEMA_VERSION, SCHEMAS
from sweep.synthetic.planted import CONDITIONS, COUPLED, INITS
from sweep.synthetic.tables import _conform, _epochs_rows, _identity

NOISES = ("normal", "t3", "skewed", "uniform", "bimodal")
#: The initial alignment of independent draws at d_model 256 (SPEC §1.1), where every init ends.
RANDOM_START = 0.0499
#: Per-run sd of each quantity (its effects are in the same units).
SD = {"alignment": 0.02, "slope": 0.05, "qk_erank": 0.3, "attn_entropy": 0.1, "pr_q": 0.3,
      "attn_entropy_iv": 0.03, "logit_std": 0.1, "qk_erank_iv": 0.3, "pr_k": 0.3, "val_loss": 0.005}
#: The bridge pairs: (its first quantity's deviation index, its second's) in ``_baseline``'s devs.
BRIDGE = {"key_spec__qk_compression": (1, 3), "qk_compression__entropy_sharpening": (3, 5),
          "qk_compression__top1_sharpening": (3, 6)}


def deviations(rng: np.random.Generator, noise: str, size) -> np.ndarray:
    """Mean-0, variance-1 draws of the named law."""
    if noise == "normal":
        return rng.standard_normal(size)
    if noise == "t3":
        return rng.standard_t(3, size) / np.sqrt(3.0)  # var(t_3) = 3
    if noise == "skewed":
        return rng.exponential(1.0, size) - 1.0
    if noise == "uniform":
        return rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size)  # var 1
    if noise == "bimodal":
        return (rng.choice([-1.0, 1.0], size) + 0.3 * rng.standard_normal(size)) / np.sqrt(1.09)
    raise ValueError(f"noise {noise!r}: valid: {', '.join(NOISES)}")


def _bridge_devs(raw: np.ndarray, effects: dict[str, float]) -> np.ndarray:
    """Deviations [7] of one trajectory with each bridge pair's planted correlation: the second
    quantity of a pair leans on the first by the pair's correlation (signs as the bridge reads them:
    key specialisation = −slope(pr_k), compression = −slope(qk_erank), entropy sharpening =
    −slope(attn_entropy), top-1 sharpening = +slope(attn_top1))."""
    d = raw.copy()
    for pair, (a, b) in BRIDGE.items():
        r = float(np.clip(effects.get(f"bridge.{pair}", 0.0), -0.95, 0.95))
        if r:
            lean = -1.0 if pair.endswith("top1_sharpening") else 1.0  # top-1's slope enters with +
            d[b] = r * lean * d[a] + np.sqrt(1 - r * r) * raw[b]
    return d


def _baseline(seeds, depths, epochs: int, noise: str, preset: str, effects: dict[str, float], rng
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, rows = [], []
    e = np.arange(epochs + 1, dtype=float)
    rank = {d: (k / (len(depths) - 1) if len(depths) > 1 else 0.0) for k, d in enumerate(sorted(depths))}
    for init in INITS:
        start = QK_INITS[init].initial_alignment
        start = RANDOM_START if start is None else start
        for d in depths:
            cats = layer_category(np.arange(d), np.full(d, d))
            for s in seeds:
                runs.append(_identity("baseline", preset, init, d, s, CONTROL))
                final = RANDOM_START + SD["alignment"] * effects.get(f"spread.alignment.L{d}", 1.0) * deviations(
                    rng, noise, ())
                if init in COUPLED:
                    final += (effects.get("alignment.contrast", 0.0) + effects.get(f"alignment.gap.L{d}", 0.0)
                              + effects.get("alignment.gap.growth", 0.0) * rank[d])
                elif QK_INITS[init].initial_alignment is None:
                    final += effects.get(f"alignment.final.{init}", 0.0)
                run_dev = deviations(rng, noise, 7)  # shared by the run's layers
                align = final + (start - final) * np.exp(-e / max(epochs / 6.0, 1.0))
                for layer in range(d):
                    dev = _bridge_devs(np.sqrt(0.5) * (run_dev + deviations(rng, noise, 7)), effects)
                    late, early = cats[layer] == "late", cats[layer] == "early"
                    k_slope = effects.get("slopes.pr_k", 0.0) + SD["slope"] * dev[1]
                    q_slope = k_slope + effects.get("slopes.pr_q_minus_pr_k", 0.0) + SD["slope"] * dev[0]
                    pr_q = (8.0 + effects.get("categories.late_mid.pr_q", 0.0) * late + SD["pr_q"] * dev[2]
                            + effects.get("depth.pr_q", 0.0) * d
                            + q_slope * (e - epochs) + 0.05 * rng.standard_normal(e.size))
                    pr_k = 9.0 + k_slope * (e - epochs) + 0.05 * rng.standard_normal(e.size)
                    qk = (10.0 + effects.get("categories.late_mid.qk_erank", 0.0) * late
                          + effects.get("categories.early_mid.qk_erank", 0.0) * early + SD["qk_erank"] * dev[4]
                          + effects.get("depth.qk_erank", 0.0) * d + 0.02 * dev[3] * (e - epochs))
                    ent = (2.5 + effects.get("categories.early_mid.attn_entropy", 0.0) * early
                           + effects.get("depth.attn_entropy", 0.0) * d
                           + SD["attn_entropy"] * dev[2] + 0.005 * dev[5] * (e - epochs))
                    top1 = 0.4 + 0.0005 * dev[6] * (e - epochs) + 0.001 * rng.standard_normal(e.size)
                    rows.append(pd.DataFrame({
                        **runs[-1], "epoch": e.astype(int), "layer": layer, "pr_q": pr_q, "pr_k": pr_k,
                        "pr_q_minus_pr_k": pr_q - pr_k, "qk_erank": qk, "attn_entropy": ent, "attn_top1": top1,
                        "attn_erank": 8.0, "logit_std": 3.0, "wq_erank": 200.0, "wk_erank": 200.0,
                        "wq_erank_head": 50.0, "wk_erank_head": 50.0, "qk_alignment": align,
                        "qk_alignment_head": list(np.repeat(align[:, None], 4, axis=1)),
                        "wq_norm": 10.0, "wk_norm": 10.0, "grad_norm_q": np.where(e == 0, np.nan, 0.1),
                        "grad_norm_k": np.where(e == 0, np.nan, 0.1), "schema_version": SCHEMA_VERSION}))
    return _conform(pd.concat(rows, ignore_index=True), "layers"), _epochs_rows(runs, epochs, rng)


def _interventions(seeds, epochs: int, noise: str, preset: str, effects: dict[str, float], rng, depth: int = 2
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, rows, final_val = [], [], []
    e = np.arange(epochs + 1, dtype=float)
    sd = {"attn_entropy": SD["attn_entropy_iv"], "logit_std": SD["logit_std"], "qk_erank": SD["qk_erank_iv"],
          "pr_k": SD["pr_k"], "val_loss": SD["val_loss"]}
    base = {"attn_entropy": 2.4, "logit_std": 4.0, "qk_erank": 8.0, "pr_k": 10.0, "val_loss": 1.21}
    for s in seeds:
        none = {m: base[m] + sd[m] * deviations(rng, noise, ()) for m in base}
        for c in CONDITIONS:
            final = dict(none) if c == CONTROL else {
                m: none[m] + sd[m] * deviations(rng, noise, ()) + effects.get(f"interventions.{c}.{m}", 0.0)
                for m in base}
            runs.append(_identity("interventions", preset, DEFAULT_INIT, depth, s, c))
            final_val.append(final["val_loss"])
            frac = e / max(epochs, 1)
            for layer in range(depth):
                cols = {m: base[m] + (final[m] - base[m]) * frac for m in ("attn_entropy", "logit_std", "qk_erank", "pr_k")}
                rows.append(pd.DataFrame({
                    **runs[-1], "epoch": e.astype(int), "layer": layer, **cols, "pr_q": cols["pr_k"] + 2.0,
                    "pr_q_minus_pr_k": 2.0, "attn_top1": 0.4, "attn_erank": 8.0, "wq_erank": 200.0,
                    "wk_erank": 200.0, "wq_erank_head": 50.0, "wk_erank_head": 50.0, "qk_alignment": 0.1,
                    "wq_norm": 10.0, "wk_norm": 10.0, "grad_norm_q": np.where(e == 0, np.nan, 0.1),
                    "grad_norm_k": np.where(e == 0, np.nan, 0.1), "schema_version": SCHEMA_VERSION}))
    return (_conform(pd.concat(rows, ignore_index=True), "layers"),
            _epochs_rows(runs, epochs, rng, final_val=np.array(final_val)))


def _checkpoints(n_series: int, effects: dict[str, float], rng, revisions: int = 4) -> pd.DataFrame:
    """``n_series`` public series of 2 layers and ``revisions`` revisions; each series' slope sign and
    link are drawn with the probabilities ``effects`` names (½ when unnamed)."""
    rows = []
    for k in range(n_series):
        positive = rng.random() < effects.get("checkpoints.positive", 0.5)
        link = rng.random() < effects.get("checkpoints.link", 0.5)
        for r in range(revisions):
            p = r / (revisions - 1)
            for layer in range(2):
                pr_k = 20.0 + 3.0 * layer + 2.0 * r + 0.1 * rng.standard_normal()
                qk = 2.0 + 0.5 * pr_k + 0.1 * rng.standard_normal()
                ent = (0.5 + 0.1 * qk if link else 6.0 - 0.2 * qk) + 0.01 * rng.standard_normal()
                pr_q = pr_k + 5.0 + (8.0 if positive else -8.0) * p
                rows.append({"series": f"series-{k}", "repo": f"org/series-{k}", "revision": f"step{r + 1}",
                             "step": r + 1, "tokens": (r + 1) * 1_000_000, "progress": p, "layer": layer,
                             "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k, "qk_erank": qk,
                             "attn_entropy": ent, "attn_top1": 0.3, "attn_erank": qk * 0.8, "logit_std": 3.0,
                             "status": "ok", "reason": None, "schema_version": SCHEMA_VERSION})
    if not rows:
        return SCHEMAS["checkpoints"].empty_table().to_pandas()
    return _conform(pd.DataFrame(rows), "checkpoints")


def make_effect_store(effects: dict[str, float] | None = None, seeds=CONFIRMATORY_SEEDS, depths=DEMO_DEPTHS,
                      epochs: int = 22, iv_seeds=None, iv_epochs: int = 20, noise: str = "normal",
                      preset: str = "demo", n_series: int = 0, rng_seed: int = 0) -> dict[str, pd.DataFrame]:
    """``layers`` / ``epochs`` / ``checkpoints`` tables with the claims' effects (module docstring);
    no effect for a claim ``effects`` does not name. The demo preset's grid by default."""
    if noise not in NOISES:
        raise ValueError(f"noise {noise!r}: valid: {', '.join(NOISES)}")
    effects = dict(effects or {})
    rng = np.random.default_rng(rng_seed)
    bl, be = _baseline(tuple(seeds), tuple(depths), epochs, noise, preset, effects, rng)
    il, ie = _interventions(tuple(iv_seeds or seeds), iv_epochs, noise, preset, effects, rng)
    return {"layers": pd.concat([bl, il], ignore_index=True), "epochs": pd.concat([be, ie], ignore_index=True),
            "checkpoints": _checkpoints(n_series, effects, rng)}


def make_null_store(**kw) -> dict[str, pd.DataFrame]:
    """A store where no counted claim has an effect (``make_effect_store`` without effects)."""
    return make_effect_store(None, **kw)
