"""How often is a scorecard verdict wrong when nothing is there? (SPEC §8, ``analysis.inference``)

    python -m bench.verdicts [--reps 20000] [--store-reps 200] [--quick] [--json FILE]

Prints, by simulation, the rates that the scorecard's words carry:

1. **The landed rule, for comparison**: "reproduced" = the 95 % percentile bootstrap interval over
   seeds excludes the opposite (what the scorecard did before), per claim, on per-seed statistics
   with no effect, at 2, 3 and 5 seeds.
2. **Per claim and family-wise, on per-seed statistics**: a family of m counted claims (each
   preset's own m: the counted claims its grid measures) with no effect, tested as the scorecard
   tests them (two-sided one-sample t-test over seeds, Holm over the family), at each preset's seed
   count, for normal, heavy-tailed (t, 3 df) and skewed (centred exponential) per-seed statistics,
   independent across claims and sharing a seed effect (correlation 0.5, as claims that share the
   seeds' runs do). Targets: a claim decided ≤ 5 %, ``direction reproduced`` ≤ 2.5 %, any claim of
   the family decided ≤ 5 %.
3. **Whole stores**: stores with no effect (``sweep.synthetic.effects``, the demo's grid and seeds)
   through ``compute_all`` and the scorecard: the largest per-claim rate and the family-wise rate.
4. **Power at the paper's effect sizes**: the chance that a claim is decided as predicted, at the
   paper preset's seed counts and family, for the per-seed standardised effects the paper's Table 3
   implies, and over a range of effects.
5. **Another factor only**: stores whose layer metrics depend on the model's depth alone (no effect
   of a layer's position), at the demo's depths and seeds and at the paper's: how often each layer
   category claim is decided, beside the pooled statistic the scorecard used before (its t test at
   the family's Bonferroni level).
6. **Gap growth under unequal spreads**: no init differs, the deepest depth's runs spread 2× (and 3×)
   the shallowest's: how often the paper's (x − max u) difference and the bracketed test decide it.
7. **The laws the t test needs**: sections 2 and 3 run normal, heavy-tailed (t₃), skewed, light-tailed
   (uniform) and bimodal (±1 + N(0, 0.3²)) per-seed statistics; the guarantee is for normal ones.
8. **The same laws, sequential**: ``--seeds auto``'s design (``analysis.sequential``, looks 3, 5, 7,
   10) on the demo's one family of 25 claims, no effect: the family-wise error per law; and a claim
   whose every seed has the same difference (no spread): the look it is decided at, never the first.

Each rate is printed with its Monte-Carlo standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np
from scipy import stats

from analysis.inference import ALPHA, REPRODUCED, REVERSED, holm, t_test
from bench.common import print_ratio

#: Per-seed standardised effects the paper's Table 3 implies (mean difference / the sd it gives):
#: these are what "the paper's effect sizes" means below.
PAPER_EFFECTS = {
    "alignment.contrast (Hedges' g, runs as units)": 4.489,
    "alignment.final.independent_xavier ((0.1895 − 0.0498) / 0.0227)": (0.1895 - 0.0498) / 0.0227,
    "alignment.gap.L4 (0.143 / 0.0950, qk_identical's sd)": 0.143 / 0.0950,
    "alignment.gap.L8 (0.314 / 0.0950)": 0.314 / 0.0950,
}
EFFECT_GRID = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def draws(rng: np.random.Generator, law: str, size) -> np.ndarray:
    """Mean-0, variance-1 draws (``sweep.synthetic.effects.deviations``' laws)."""
    from sweep.synthetic.effects import deviations

    return deviations(rng, law, size)


def family(rng, law: str, reps: int, n: int, m: int, rho: float, effects: np.ndarray | None = None) -> np.ndarray:
    """Per-seed statistics [reps, m, n]: a shared seed effect (correlation ``rho`` between claims) plus
    each claim's own, standardised; ``effects`` [m] added (0: no effect)."""
    shared = draws(rng, law, (reps, 1, n))
    own = draws(rng, law, (reps, m, n))
    y = math.sqrt(rho) * shared + math.sqrt(1.0 - rho) * own
    return y if effects is None else y + effects[None, :, None]


def t_pvalues(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided one-sample t p-values against 0 and the mean's sign, vectorised over [..., n]
    (the same test as ``analysis.inference.t_test``, which a spot check below compares)."""
    res = stats.ttest_1samp(y, 0.0, axis=-1)
    return res.pvalue, np.sign(y.mean(-1))


def holm_decided(p: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Holm's step-down decisions for each row of p [reps, m] (vectorised ``analysis.inference.holm``)."""
    m = p.shape[-1]
    order = np.argsort(p, axis=-1)
    sorted_p = np.take_along_axis(p, order, -1)
    adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * sorted_p), axis=-1)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, -1)
    return out <= alpha


def old_rule(rng, reps: int, n: int, resamples: int = 2000) -> float:
    """P(the landed rule says "reproduced") for one claim with no effect, expectation > 0: the mean is
    positive and the 2.5th percentile of the percentile bootstrap of the mean over seeds is > 0."""
    y = rng.standard_normal((reps, n))
    idx = rng.integers(0, n, (reps, resamples, n))
    boot = np.take_along_axis(np.repeat(y[:, None, :], resamples, 1), idx, -1).mean(-1)
    lo = np.percentile(boot, 2.5, axis=-1)
    return float(((y.mean(-1) > 0) & (lo > 0)).mean())


def se(p: float, reps: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / reps)


def family_sizes(presets=("demo", "paper-depths", "paper")) -> dict[str, int]:
    """The counted claims each preset's grid measures (on a store with no effect: the rows the
    scorecard would test), with each preset's seed count."""
    from analysis import scorecard as sc
    from analysis.compute import compute_all
    from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
    from sweep.synthetic.effects import make_null_store

    out = {}
    for name in presets:
        b, i = BASELINE_PRESETS[name], INTERVENTION_PRESETS[name]
        tables = make_null_store(seeds=b.seeds, depths=b.depths, epochs=8, iv_seeds=i.seeds, iv_epochs=4, preset=name)
        rows = sc.build_scorecard(compute_all(tables, preset=name), name, paper_scale=name == "paper")
        out[name] = sum(r.block == "counted" and r.p_adj is not None for r in rows)
    return out


def per_claim_table(rng, reps: int, sizes: dict[str, int], laws=("normal", "t3", "skewed")) -> list[dict[str, Any]]:
    from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS

    rows = []
    for name, m in sizes.items():
        ns = sorted({len(BASELINE_PRESETS[name].seeds), len(INTERVENTION_PRESETS[name].seeds)})
        for n in ns:
            for law in laws:
                for rho in (0.0, 0.5):
                    y = family(rng, law, reps, n, m, rho)
                    p, sign = t_pvalues(y)
                    decided = holm_decided(p)
                    unadjusted = p <= ALPHA
                    rows.append({"preset": name, "seeds": n, "m": m, "law": law, "rho": rho, "reps": reps,
                                 "claim_decided": float(decided.mean()),
                                 "claim_reproduced": float((decided & (sign > 0)).mean()),
                                 "claim_decided_unadjusted": float(unadjusted.mean()),
                                 "fwer": float(decided.any(-1).mean()),
                                 "fwer_unadjusted": float(unadjusted.any(-1).mean())})
    return rows


def store_level(reps: int, law: str) -> dict[str, Any]:
    """Null stores of the demo's grid through the whole reducer and scorecard."""
    from analysis import scorecard as sc
    from analysis.compute import compute_all
    from sweep.synthetic.effects import make_null_store

    decided: dict[str, int] = {}
    any_decided = reproduced = 0
    for r in range(reps):
        tables = make_null_store(noise=law, rng_seed=1000 + r)
        rows = sc.build_scorecard(compute_all(tables, preset="demo"), "demo", False)
        counted = [row for row in rows if row.block == "counted" and row.p_adj is not None]
        hits = [row for row in counted if row.verdict in (REPRODUCED, REVERSED)]
        for row in counted:
            decided[row.id] = decided.get(row.id, 0) + (row in hits)
        any_decided += bool(hits)
        reproduced += sum(row.verdict == REPRODUCED for row in hits)
    worst = max(decided, key=lambda k: decided[k])
    return {"law": law, "reps": reps, "m": len(decided), "fwer": any_decided / reps,
            "claim_decided_max": decided[worst] / reps, "worst_claim": worst,
            "claim_decided_mean": sum(decided.values()) / (reps * len(decided)),
            "claim_reproduced_mean": reproduced / (reps * len(decided)),
            "by_claim": {k: v / reps for k, v in sorted(decided.items(), key=lambda kv: -kv[1]) if v}}


DEPTH_ONLY = {"depth.qk_erank": 2.0, "depth.attn_entropy": 0.5, "depth.pr_q": 2.0}


def depth_only(reps: int, depths: tuple[int, ...], seeds: tuple[int, ...]) -> dict[str, Any]:
    """Stores whose final layer metrics depend on the model's depth only: each category claim's
    decision rate through the scorecard, and the pooled (run, layer) contrast's at α/m."""
    from analysis import scorecard as sc
    from analysis.compute import compute_all
    from analysis.frames import final_rows, layer_category
    from sweep.synthetic.effects import make_effect_store

    ids = ("categories.late_mid.qk_erank", "categories.late_mid.pr_q", "categories.early_mid.attn_entropy",
           "categories.early_mid.qk_erank")
    new = dict.fromkeys(ids, 0)
    old = dict.fromkeys(ids, 0)
    fam = 0
    for r in range(reps):
        tables = make_effect_store(DEPTH_ONLY, depths=depths, seeds=seeds, epochs=6, iv_epochs=3, rng_seed=5000 + r)
        rows = {row.id: row for row in sc.build_scorecard(compute_all(tables, preset="demo"), "demo", False)}
        m = sum(row.block == "counted" and row.p_adj is not None for row in rows.values())
        lay = tables["layers"]
        fin = final_rows(lay[lay["sweep"] == "baseline"])
        fin = fin.assign(category=layer_category(fin["layer"], fin["depth"]))
        hit = False
        for cid in ids:
            hi, lo = cid.split(".")[1].split("_")
            metric = cid.split(".")[2]
            new[cid] += rows[cid].verdict in (REPRODUCED, REVERSED)
            hit |= rows[cid].verdict in (REPRODUCED, REVERSED)
            means = fin.groupby(["seed", "category"])[metric].mean().unstack()
            if hi in means and lo in means:
                old[cid] += t_test((means[hi] - means[lo]).to_numpy()).p <= ALPHA / m
        fam += hit
    return {"depths": list(depths), "seeds": len(seeds), "reps": reps, "decided": {k: v / reps for k, v in new.items()},
            "pooled_decided": {k: v / reps for k, v in old.items()}, "any_category_decided": fam / reps}


def gap_growth(rng, reps: int, n: int, ratio: float) -> dict[str, Any]:
    """No init differs at either depth; the deep depth's runs spread ``ratio`` × the shallow's. Rate of
    decisions at α (one claim) by the paper's x − max at both depths and by the bracketed test."""
    from analysis.inference import against_test

    x4, u4 = rng.standard_normal((reps, n)), rng.standard_normal((reps, 2, n))
    x8, u8 = ratio * rng.standard_normal((reps, n)), ratio * rng.standard_normal((reps, 2, n))
    plain = (x8 - u8.max(1)) - (x4 - u4.max(1))
    low, high = (x8 - u8.max(1)) - (x4 - u4.min(1)), (x8 - u8.min(1)) - (x4 - u4.max(1))
    p_old, sign = t_pvalues(plain)
    p_new = np.array([against_test(lo, hi, 0.0, +1).p for lo, hi in zip(low, high, strict=True)])
    return {"seeds": n, "ratio": ratio, "reps": reps, "mean_plain": float(plain.mean()),
            "old_decided": float((p_old <= ALPHA).mean()), "old_reversed": float(((p_old <= ALPHA) & (sign < 0)).mean()),
            "new_decided": float((p_new <= ALPHA).mean())}


def sequential_laws(rng, reps: int, laws, m: int = 25, max_seeds: int = 10) -> list[dict[str, Any]]:
    """``--seeds auto``'s family-wise error on ``m`` null claims of each law (claims sharing a seed
    effect, ρ 0.5, as the paired differences to one ``none`` run do)."""
    from analysis.sequential import make_design, run_family

    design = make_design(max_seeds, ALPHA, m)
    out = []
    for law in laws:
        x = family(rng, law, reps, design.max_seeds, m, 0.5)
        decided = run_family(x, design).level > 0
        out.append({"law": law, "m": m, "looks": list(design.looks), "reps": reps,
                    "fwer": float(decided.any(-1).mean()), "claim_decided": float(decided.mean())})
    return out


def sequential_zero_spread(delta: float = 0.1, m: int = 25, max_seeds: int = 10) -> dict[str, Any]:
    """One claim whose every seed has the same difference ``delta``, alone (α) and in the demo's family
    (α/m at its start): the look that decides it, and its p (never 0)."""
    from analysis.sequential import look_stat, make_design, run_family

    out = {"delta": delta}
    for size in (1, m):
        design = make_design(max_seeds, ALPHA, size)
        x = np.zeros((1, size, design.max_seeds))
        x[0, 0] = delta
        o = run_family(x, design)
        look = int(o.round[0, 0])
        n = design.looks[look] if look >= 0 else None
        out[f"family_{size}"] = {"decided_at_seeds": n, "looks": list(design.looks),
                                 "p": look_stat(x[0, 0, :n], 0.0).p if n else None}
    return out


def power_table(rng, reps: int, m: int, n: int) -> list[dict[str, Any]]:
    """P(decided as predicted) for one claim of effect d in a family of m whose other claims are null."""
    out = []
    named = list(PAPER_EFFECTS.items()) + [(f"d = {d:g}", d) for d in EFFECT_GRID]
    for label, d in named:
        effects = np.zeros(m)
        effects[0] = d
        y = family(rng, "normal", reps, n, m, 0.5, effects)
        p, sign = t_pvalues(y)
        decided = holm_decided(p)
        out.append({"effect": label, "d": d, "seeds": n, "m": m, "power": float((decided[:, 0] & (sign[:, 0] > 0)).mean()),
                    "power_alone": float(((p[:, 0] <= ALPHA) & (sign[:, 0] > 0)).mean())})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.verdicts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20000, help="simulated families per cell of the tables")
    ap.add_argument("--store-reps", type=int, default=200, help="simulated stores per noise law (whole reducer)")
    ap.add_argument("--quick", action="store_true", help="few repetitions (≈ 1 min): a rough look")
    ap.add_argument("--tiny", action="store_true", help="a smoke run of every section (tests)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    reps, store_reps = (200, 1) if args.tiny else (2000, 10) if args.quick else (args.reps, args.store_reps)
    laws = ("normal",) if args.tiny else ("normal", "t3", "skewed", "uniform", "bimodal")
    rng = np.random.default_rng(20261206)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"alpha": ALPHA}

    # the vectorised test is the scorecard's own
    y = rng.standard_normal((5, 4))
    assert np.allclose(t_pvalues(y)[0], [t_test(row).p for row in y]), "vectorised t-test differs"
    assert np.array_equal(holm_decided(np.array([[0.01, 0.04, 0.03]])),
                          np.array([[v <= ALPHA for v in holm([0.01, 0.04, 0.03])]]))

    print("1. the landed rule (percentile bootstrap interval excludes the opposite), one claim, no effect:")
    out["old_rule"] = []
    for n in (2, 3, 5):
        r = old_rule(rng, max(reps // 20, 200), n)
        out["old_rule"].append({"seeds": n, "reproduced": r})
        print(f"   {n} seeds: P(reproduced) = {r:.3f} (target 0.025)")

    sizes = family_sizes(("demo",) if args.tiny else ("demo", "paper-depths", "paper"))
    out["family_sizes"] = sizes
    print(f"\n2. per-seed statistics, no effect, t-test + Holm over the preset's family ({reps} families a row):")
    print(f"   {'preset':<13}{'seeds':>5}{'m':>4}  {'law':<7}{'ρ':>4}  {'claim decided':>13}  {'reproduced':>10}  "
          f"{'family-wise':>11}  {'(unadjusted: claim, family)':>28}")
    out["per_claim"] = per_claim_table(rng, reps, sizes, laws)
    for r in out["per_claim"]:
        print(f"   {r['preset']:<13}{r['seeds']:>5}{r['m']:>4}  {r['law']:<7}{r['rho']:>4}  "
              f"{r['claim_decided']:>13.4f}  {r['claim_reproduced']:>10.4f}  {r['fwer']:>11.4f}  "
              f"{r['claim_decided_unadjusted']:>14.4f}, {r['fwer_unadjusted']:.4f}")
    print(f"   targets: claim decided ≤ {ALPHA}, reproduced ≤ {ALPHA / 2}, family-wise ≤ {ALPHA} "
          f"(MC error ≈ {se(ALPHA, reps):.4f})")

    print(f"\n3. whole stores with no effect (the demo preset's grid and seeds), compute_all + scorecard, "
          f"{store_reps} stores a law:")
    out["stores"] = []
    for law in laws:
        r = store_level(store_reps, law)
        out["stores"].append(r)
        print(f"   {law:<7} m = {r['m']}: family-wise {r['fwer']:.3f} ± {se(r['fwer'], store_reps):.3f}; per claim "
              f"mean {r['claim_decided_mean']:.4f}, largest {r['claim_decided_max']:.3f} ({r['worst_claim']}); "
              f"reproduced per claim {r['claim_reproduced_mean']:.4f}")
        print("           decided: " + (", ".join(f"{k} {v:.3f}" for k, v in r["by_claim"].items()) or "none"))

    from sweep.presets import BASELINE_PRESETS

    n_paper, m_paper = len(BASELINE_PRESETS["paper"].seeds), sizes.get("paper", sizes["demo"])
    print(f"\n4. power: P(decided as predicted) at the paper preset ({n_paper} seeds, family of {m_paper}, "
          "the others null, seed correlation 0.5):")
    out["power"] = power_table(rng, reps, m_paper, n_paper)
    for r in out["power"]:
        print(f"   {r['effect']:<62} d = {r['d']:5.2f}: {r['power']:.3f} (alone, unadjusted: {r['power_alone']:.3f})")
    n_demo = len(BASELINE_PRESETS["demo"].seeds)
    out["power_demo"] = power_table(rng, reps, sizes["demo"], n_demo)
    print(f"   the demo ({n_demo} seeds, family of {sizes['demo']}): "
          + ", ".join(f"d {r['d']:g}: {r['power']:.2f}" for r in out["power_demo"] if r["effect"].startswith("d =")))

    from sweep.presets import CONFIRMATORY_SEEDS, DEMO_DEPTHS, PAPER_SEEDS

    depth_reps = 1 if args.tiny else max(store_reps // 4, 5)
    print(f"\n5. another factor only: layer metrics that depend on the model's depth alone ({depth_reps} stores a grid):")
    out["depth_only"] = [depth_only(depth_reps, DEMO_DEPTHS, CONFIRMATORY_SEEDS),
                         depth_only(depth_reps, (4, 6, 8), PAPER_SEEDS)]
    for r in out["depth_only"]:
        print(f"   depths {r['depths']}, {r['seeds']} seeds: any category claim decided {r['any_category_decided']:.3f} "
              f"(target ≤ {ALPHA}); per claim " + ", ".join(
                  f"{k.split('.', 1)[1]} {v:.3f} (pooled before: {r['pooled_decided'][k]:.2f})"
                  for k, v in r["decided"].items()))

    print(f"\n6. gap growth, no init differs, the deepest depth's runs spread more ({reps // 4} experiments a row):")
    out["gap_growth"] = [gap_growth(rng, max(reps // 4, 100), n, ratio) for ratio in (2.0, 3.0) for n in (6, 20, 50)]
    for r in out["gap_growth"]:
        print(f"   σ ratio {r['ratio']:g}, {r['seeds']:>2} seeds: x − max at both depths decided {r['old_decided']:.3f} "
              f"(reversed {r['old_reversed']:.3f}; its mean {r['mean_plain']:+.3f}); bracketed {r['new_decided']:.3f} "
              f"(target ≤ {ALPHA}, MC error ≈ {se(ALPHA, r['reps']):.3f})")

    print(f"\n8. --seeds auto (looks 3, 5, 7, 10), the demo's one family of 25, no effect, seed correlation 0.5 "
          f"({reps} experiments a law):")
    out["sequential_laws"] = sequential_laws(rng, reps, laws)
    for r in out["sequential_laws"]:
        print(f"   {r['law']:<8} family-wise {r['fwer']:.4f} (target ≤ {ALPHA}, MC error ≈ {se(ALPHA, reps):.4f}); "
              f"per claim {r['claim_decided']:.4f}")
    z = sequential_zero_spread()
    out["sequential_zero_spread"] = z
    for size in (1, 25):
        r = z[f"family_{size}"]
        where = (f"decided at {r['decided_at_seeds']} seeds (p = {r['p']:.3g})" if r["decided_at_seeds"]
                 else "never decided within 10 seeds")
        print(f"   a Δ of {z['delta']} in every seed, {'alone' if size == 1 else 'in the family of 25'}: {where}; "
              f"the first look is {r['looks'][0]} seeds")

    worst = max(r["fwer"] for r in out["per_claim"] if r["law"] == "normal")
    out["seconds"] = time.perf_counter() - t0
    print_ratio("largest family-wise error, normal per-seed statistics, over presets (target ≤ 0.05)", worst,
                f"<= {ALPHA}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
