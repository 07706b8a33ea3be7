"""``--seeds auto``'s errors by simulation, beside their targets: the demo's family of claims.

    python -m bench.sequential_error [--experiments 100000] [--claims 10] [--max-seeds 10] [--alpha 0.05]
                                     [--tiny] [--json FILE]

The family is the demo's: ``--claims`` claims whose paired differences share one control run per
seed (correlation 0.5; ``analysis.sequential_power.family_differences``), looks at
``look_schedule(--max-seeds)``, family-wise α over all claims and looks (``analysis.sequential``).
Printed, each on ``--experiments`` simulated experiments (Monte-Carlo error beside it):

* under the global null: the family-wise and the per-claim error for normal runs, runs with t
  (3 df) tails, and skewed differences (a centred gamma: skewness 0.71 with the shared control;
  0.5, 1 and 2 for independent claims, which break the guarantee: the t-test needs symmetry);
* the design before, each claim at α alone, on the same normal family;
* planted effects (every claim at δ sd, and half of them): power, expected seeds, and the null
  half's family-wise error; then δ*, the fixed design of the same power (``fixed_same_power``).

Seconds (``--tiny``: a fraction of one). ``ratio``: the normal family-wise error over α (target:
≤ 1 within 2 Monte-Carlo errors).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from analysis.sequential import make_design, run_family
from analysis.sequential_power import family_differences, fixed_same_power
from bench.common import machine

SEED = 20262
#: (law, shared control, skewness of the run's own part, label) of the null families
NULLS = (("normal", True, 0.0, "normal"), ("t3", True, 0.0, "t, 3 df"), ("skewed", True, 2.0, "skewed 0.71"),
         ("normal", False, 0.0, "normal, independent"), ("skewed", False, 0.5, "skewed 0.5, independent"),
         ("skewed", False, 1.0, "skewed 1, independent"), ("skewed", False, 2.0, "skewed 2, independent"))


def _mc(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def measure(experiments: int, m: int, max_seeds: int, alpha: float, effects: tuple[float, ...]) -> dict[str, Any]:
    design = make_design(max_seeds, alpha, m)
    alone = make_design(max_seeds, alpha, 1)
    rng = np.random.default_rng(SEED)
    n = design.max_seeds
    out: dict[str, Any] = {"claims": m, "looks": list(design.looks), "alpha": alpha, "experiments": experiments,
                           "mc_error": _mc(alpha, experiments), "null": [], "planted": []}
    for law, shared, skewness, label in NULLS:
        x = family_differences(rng, experiments, m, n, law, shared=shared, skewness=skewness or 2.0)
        rejected = run_family(x, design).level > 0
        row = {"law": label, "family_wise": float(rejected.any(axis=-1).mean()), "per_claim": float(rejected.mean())}
        if label == "normal":
            each = run_family(x.reshape(experiments * m, 1, n), alone).level.reshape(experiments, m) > 0
            out["alone"] = {"family_wise": float(each.any(axis=-1).mean()), "per_claim": float(each.mean())}
        out["null"].append(row)
    looks = np.asarray(design.looks)
    for effect in effects:
        for share in (1.0, 0.5):
            k = max(1, round(m * share))
            planted = np.r_[np.full(k, effect), np.zeros(m - k)]
            o = run_family(family_differences(rng, experiments, m, n, "normal", planted), design)
            hit = (o.level[:, :k] > 0) & (o.sign[:, :k] > 0)
            seeds = np.where(o.level[:, :k] > 0, looks[np.maximum(o.round[:, :k], 0)], n)
            null = float((o.level[:, k:] > 0).any(axis=-1).mean()) if k < m else None
            out["planted"].append({"effect": effect, "claims_with_effect": k, "power": float(hit.mean()),
                                   "expected_seeds": float(seeds.mean()), "null_family_wise": null})
    fixed = fixed_same_power(design)
    out["fixed_same_power"] = {"effect": fixed.effect, "level": fixed.level, "seeds": fixed.seeds,
                               "fixed_power": fixed.fixed_power}
    return out


def report(r: dict[str, Any]) -> None:
    a, mc = r["alpha"], r["mc_error"]
    print(f"family: {r['claims']} claims sharing one control, looks {r['looks']}, family-wise α {a}; "
          f"{r['experiments']} experiments each (MC error of α: {mc:.4f})")
    print(f"  {'null law':<24} {'family-wise':>12} {'target':>8} {'per claim':>10} {'target':>8}")
    for row in r["null"]:
        print(f"  {row['law']:<24} {row['family_wise']:>12.4f} {'≤ ' + format(a, 'g'):>8} {row['per_claim']:>10.4f} "
              f"{'≤ ' + format(a, 'g'):>8}")
    print(f"  {'each claim at α alone':<24} {r['alone']['family_wise']:>12.4f} {'≤ ' + format(a, 'g'):>8} "
          f"{r['alone']['per_claim']:>10.4f} {'≤ ' + format(a, 'g'):>8}   (the design before)")
    print(f"  {'planted effect':<24} {'power':>12} {'E[seeds]':>9} {'null half family-wise':>22}")
    for p in r["planted"]:
        null = "—" if p["null_family_wise"] is None else f"{p['null_family_wise']:.4f}"
        label = f"{p['effect']:g} sd in {p['claims_with_effect']} of {r['claims']}"
        print(f"  {label:<24} {p['power']:>12.3f} {p['expected_seeds']:>9.2f} {null:>22}")
    f = r["fixed_same_power"]
    print(f"  δ* = {f['effect']:.2f} sd: 80 % power for one claim at α/m = {f['level']:.4g}; the fixed t-test of "
          f"the same power needs {f['seeds']} seeds (noncentral t power {f['fixed_power']:.3f})")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.sequential_error", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", type=int, default=100_000)
    p.add_argument("--claims", type=int, default=10)
    p.add_argument("--max-seeds", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--quick", action="store_true", help="20,000 experiments (bench.run_all --quick)")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: 2,000 experiments, one effect")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    experiments = 2_000 if args.tiny else 20_000 if args.quick else args.experiments
    effects = (2.0,) if args.tiny else (1.0, 1.5, 2.0, 3.0)
    t0 = time.perf_counter()
    r = measure(experiments, args.claims, args.max_seeds, args.alpha, effects)
    r["wall_s"] = time.perf_counter() - t0
    report(r)
    normal = r["null"][0]["family_wise"]
    out: dict[str, Any] = {"benchmark": "sequential_error", "results": r, "machine": machine(),
                           "ratio": max(normal, 1e-9) / args.alpha,
                           "target": "family-wise error / α ≤ 1 + 2 MC", "met": normal <= args.alpha + 2 * r["mc_error"]}
    print(f"RATIO {out['ratio']:.3f} (family-wise error / α, normal null; target ≤ 1 within 2 MC errors: "
          f"{'met' if out['met'] else 'NOT met'}) in {r['wall_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
