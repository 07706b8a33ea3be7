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

* one family over both sweeps (``sweep.demo --seeds auto``): the demo's 15 baseline claims (12 on
  one statistic, sharing the seed; the 3 alignment gaps on two, x − the larger and x − the smaller
  of two references) decided first, then the 10 intervention claims, one Holm-type family of 25
  (``run_timeline``): the family-wise error under the global null, beside the same data decided as
  two experiments each at α (what running the sweeps one by one gives) and as a Bonferroni split
  of α by claim counts without recycling; and the interventions' power when the baseline's claims
  have effects (α handed on) against the split.

* the paper preset (``sweep.baseline --preset paper --seeds auto``): its 15 baseline claims, the
  four whose effect the paper's Table 3 gives at that effect (``bench.verdicts.PAPER_EFFECTS``,
  per-seed standardised; the alignment gaps on two statistics) and the other 11 null (no α handed
  on by them): each claim's power and expected seeds at ``--max-seeds`` 10 and 20, alone and as one
  family with the 10 intervention claims, against the fixed 4 seeds with Holm over the scorecard's
  25 counted claims (``bench.verdicts``' power, the same per-seed simulation).

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

from analysis.sequential import (
    against_reach,
    crossing_level,
    make_design,
    run_family,
    run_timeline,
    t_stats,
)
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


#: The demo's joint family: baseline claims on one statistic, on two (the gaps), intervention claims.
JOINT = (12, 3, 10)
CHUNK = 20_000


def _gaps(rng: np.random.Generator, experiments: int, k: int, n: int, effect: float) -> tuple[np.ndarray, np.ndarray]:
    """(y, y_against) [experiments, k, n]: x − the larger and x − the smaller of two references, x and
    the references independent normal per seed, ``effect`` sd added to x (0: no effect, E[y] < 0 < E[y_against])."""
    x = rng.standard_normal((experiments, k, n)) + effect
    u = rng.standard_normal((experiments, k, n, 2))
    return x - u.max(-1), x - u.min(-1)


def _reach_paths(design, plain: np.ndarray, y: np.ndarray, ya: np.ndarray) -> list[np.ndarray]:
    """Each look's reaches [E, m] of a baseline block: plain claims, then the two-statistic ones."""
    tp, ty, ta = (t_stats(v, design.looks) for v in (plain, y, ya))
    return [np.concatenate([crossing_level(tp[..., : k + 1], design),
                            against_reach(ty[..., : k + 1], ta[..., : k + 1], 1, design)], axis=-1)
            for k in range(design.n_looks)]


def joint_chunk(rng, experiments: int, design, effects_b: tuple[float, float, int], effect_i: float,
                split: tuple | None = None) -> dict[str, np.ndarray]:
    """One chunk of joint experiments: rejected [E, m] under the joint procedure, as two experiments
    each at α, and as a Bonferroni split (``split``: the baseline's and the interventions' designs)."""
    m_plain, m_gap, m_i = JOINT
    m_b, n = m_plain + m_gap, design.max_seeds
    plain = family_differences(rng, experiments, m_plain, n, "normal",
                               np.r_[np.full(effects_b[2], effects_b[0]), np.zeros(m_plain - effects_b[2])])
    y, ya = _gaps(rng, experiments, m_gap, n, effects_b[1])
    xi = family_differences(rng, experiments, m_i, n, "normal", effect_i)
    ti = t_stats(xi, design.looks)
    base = _reach_paths(design, plain, y, ya)
    zeros_i = np.zeros((experiments, m_i), int)
    timeline = [np.concatenate([r, zeros_i], -1) for r in base]
    timeline += [np.concatenate([base[-1], crossing_level(ti[..., : k + 1], design)], -1) for k in range(design.n_looks)]
    out = {}
    level, event = run_timeline(timeline, m_b + m_i)
    out["joint"] = level > 0
    out["joint_seeds_i"] = np.where(level[:, m_b:] > 0, np.asarray(design.looks)[np.maximum(event[:, m_b:] - design.n_looks,
                                                                                              0)], n)
    alone_b, alone_i = (make_design(n, design.alpha, m) for m in (m_b, m_i))
    lb, _ = run_timeline(_reach_paths(alone_b, plain, y, ya), m_b)
    li, _ = run_timeline([crossing_level(t_stats(xi, alone_i.looks)[..., : k + 1], alone_i)
                          for k in range(alone_i.n_looks)], m_i)
    out["separate"] = np.concatenate([lb > 0, li > 0], -1)
    if split is not None:
        sb, si = split
        lb, _ = run_timeline(_reach_paths(sb, plain, y, ya), m_b)
        li, _ = run_timeline([crossing_level(t_stats(xi, si.looks)[..., : k + 1], si) for k in range(si.n_looks)], m_i)
        out["split"] = np.concatenate([lb > 0, li > 0], -1)
    return out


def measure_joint(experiments: int, max_seeds: int, alpha: float) -> dict[str, Any]:
    """The joint family's errors and the interventions' power (module docstring)."""
    m_plain, m_gap, m_i = JOINT
    m_b, m = m_plain + m_gap, sum(JOINT)
    design = make_design(max_seeds, alpha, m)
    split = (make_design(max_seeds, alpha * m_b / m, m_b), make_design(max_seeds, alpha * m_i / m, m_i))
    rng = np.random.default_rng(SEED + 1)
    out: dict[str, Any] = {"claims": list(JOINT), "experiments": experiments, "alpha": alpha,
                           "mc_error": _mc(alpha, experiments)}
    cases = (("null", (0.0, 0.0, 0), 0.0), ("baseline 3 sd, interventions 1.5 sd", (3.0, 3.0, m_plain), 1.5),
             ("baseline 10 of 15 at 3 sd, interventions 1.5 sd", (3.0, 3.0, m_plain - 5), 1.5),
             ("baseline null, interventions 1.5 sd", (0.0, 0.0, 0), 1.5))
    for label, effects_b, effect_i in cases:
        acc: dict[str, list] = {}
        done = 0
        while done < experiments:
            size = min(CHUNK, experiments - done)
            for k, v in joint_chunk(rng, size, design, effects_b, effect_i, split).items():
                acc.setdefault(k, []).append(v)
            done += size
        r = {k: np.concatenate(v) for k, v in acc.items()}
        row: dict[str, Any] = {"case": label}
        if label == "null":
            for k in ("joint", "separate", "split"):
                row[k] = float(r[k].any(-1).mean())
        else:
            for k in ("joint", "split"):
                row[f"{k}_power_interventions"] = float(r[k][:, m_b:].mean())
            row["joint_seeds_interventions"] = float(r["joint_seeds_i"].mean())
            null_b = [i for i in range(m_plain) if i >= effects_b[2]] if effects_b[0] else list(range(m_b))
            if null_b:
                row["joint_baseline_family_wise"] = float(r["joint"][:, null_b].any(-1).mean())
        out.setdefault("rows", []).append(row)
    return out


def report_joint(r: dict[str, Any]) -> None:
    m_plain, m_gap, m_i = r["claims"]
    a, mc = r["alpha"], r["mc_error"]
    print(f"one family over both sweeps: {m_plain + m_gap} baseline claims ({m_gap} on two statistics) then {m_i} "
          f"intervention claims, {r['experiments']} experiments (MC error of α: {mc:.4f})")
    for row in r["rows"]:
        if row["case"] == "null":
            print(f"  global null: family-wise error, one family {row['joint']:.4f} (target ≤ {a:g}); two experiments "
                  f"each at α {row['separate']:.4f}; α split by claim counts {row['split']:.4f}")
        else:
            extra = (f"; the null baseline claims' family-wise error {row['joint_baseline_family_wise']:.4f}"
                     if "joint_baseline_family_wise" in row else "")
            print(f"  {row['case']}: intervention power, one family {row['joint_power_interventions']:.3f} "
                  f"(E[seeds] {row['joint_seeds_interventions']:.2f}), split {row['split_power_interventions']:.3f}"
                  f"{extra}")


#: The paper preset's four claims with an effect the paper's Table 3 gives (per-seed standardised,
#: as ``bench.verdicts`` reads them), and whether each is tested on two statistics (a gap).
PAPER_CLAIMS = (("alignment.contrast", 4.489, False), ("alignment.final.independent_xavier", (0.1895 - 0.0498) / 0.0227,
                                                         False),
                ("alignment.gap.L4", 0.143 / 0.0950, True), ("alignment.gap.L8", 0.314 / 0.0950, True))
#: The paper preset's baseline family: 15 claims, 3 of them gaps (L4, L6, L8); its scorecard counts 25.
PAPER_FAMILY, PAPER_GAPS, PAPER_COUNTED, PAPER_FIXED_SEEDS = 15, 3, 25, 4
#: sd of x − the larger of two references over that of x − …: 1 + var(max of 2 normals) = 1.6817
GAP_SD = math.sqrt(2.0 - 1.0 / math.pi)


def _paper_values(rng, experiments: int, n: int, rho: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-seed statistics [E, 15, n] of the paper's baseline family (the PAPER_CLAIMS first, then 11
    null; the gaps L4, L8 and the null L6 at 2, 3, 4 on two statistics): unit variance, a shared
    seed part (correlation ``rho``); (y, y_against of the gaps [E, 3, n], which gaps)."""
    shared = rng.standard_normal((experiments, 1, n))
    y = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((experiments, PAPER_FAMILY, n))
    y[:, : len(PAPER_CLAIMS)] += np.array([d for _, d, _ in PAPER_CLAIMS])[None, :, None]
    gaps = [2, 3, 4]  # gap L4, gap L8, a null gap L6
    spread = np.abs(rng.standard_normal((experiments, 3, n)) - rng.standard_normal((experiments, 3, n))) / GAP_SD
    return y, y[:, gaps] + spread, np.array(gaps)


def measure_paper(experiments: int, alpha: float, maxima: tuple[int, ...] = (10, 20)) -> dict[str, Any]:
    """The paper preset's baseline family under ``--seeds auto`` against the fixed 4 seeds (docstring)."""
    from bench.verdicts import holm_decided, t_pvalues

    rng = np.random.default_rng(SEED + 2)
    out: dict[str, Any] = {"experiments": experiments, "alpha": alpha, "rows": [], "maxima": list(maxima)}
    for max_seeds in maxima:
        for m in (PAPER_FAMILY, PAPER_COUNTED):
            design = make_design(max_seeds, alpha, m)
            y, ya, gaps = _paper_values(rng, experiments, max_seeds)
            t, ta = t_stats(y, design.looks), t_stats(ya, design.looks)
            plain = [i for i in range(PAPER_FAMILY) if i not in gaps]
            reaches = []
            for k in range(design.n_looks):
                r = np.zeros((experiments, m), int)  # the intervention claims (m = 25): no data, null
                r[:, plain] = crossing_level(t[:, plain, : k + 1], design)
                r[:, gaps] = against_reach(t[:, gaps, : k + 1], ta[..., : k + 1], 1, design)
                reaches.append(r)
            level, event = run_timeline(reaches, m)
            looks = np.asarray(design.looks)
            for i, (cid, d, _) in enumerate(PAPER_CLAIMS):
                hit = level[:, i] > 0
                seeds = np.where(hit, looks[np.maximum(event[:, i], 0)], max_seeds)
                out["rows"].append({"claim": cid, "d": d, "max_seeds": max_seeds, "family": m,
                                    "power": float(hit.mean()), "expected_seeds": float(seeds.mean()),
                                    "seeds_if_decided": float(seeds[hit].mean()) if hit.any() else None})
    fixed = np.zeros((experiments, PAPER_COUNTED, PAPER_FIXED_SEEDS))
    fixed[:, :PAPER_FAMILY] = _paper_values(rng, experiments, PAPER_FIXED_SEEDS)[0]
    fixed[:, PAPER_FAMILY:] = rng.standard_normal((experiments, PAPER_COUNTED - PAPER_FAMILY, PAPER_FIXED_SEEDS))
    p, sign = t_pvalues(fixed)
    decided = holm_decided(p, alpha) & (sign > 0)
    out["fixed"] = [{"claim": cid, "d": d, "seeds": PAPER_FIXED_SEEDS, "family": PAPER_COUNTED,
                     "power": float(decided[:, i].mean())} for i, (cid, d, _) in enumerate(PAPER_CLAIMS)]
    return out


def report_paper(r: dict[str, Any]) -> None:
    print(f"the paper preset's baseline under --seeds auto ({r['experiments']} experiments; the 4 claims with the "
          f"paper's effect, the other 11 null): power / E[seeds] (seeds when decided)")
    fixed = {row["claim"]: row["power"] for row in r["fixed"]}
    head = "".join(f"{f'max {n}, m {m}':>24}" for n in r["maxima"] for m in (PAPER_FAMILY, PAPER_COUNTED))
    print(f"  {'claim':<36}{'d':>6}{'fixed 4 seeds, Holm 25':>24}{head}")
    for cid, d, _ in PAPER_CLAIMS:
        cells = [row for row in r["rows"] if row["claim"] == cid]
        text = "".join(f"{row['power']:>9.3f} / {row['expected_seeds']:5.2f} ({row['seeds_if_decided'] or 0:4.1f})"
                       for row in cells)
        print(f"  {cid:<36}{d:>6.2f}{fixed[cid]:>24.3f}{text}")


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
    report(r)
    r["joint"] = measure_joint(experiments, args.max_seeds, args.alpha)
    report_joint(r["joint"])
    r["paper"] = measure_paper(experiments, args.alpha, (10,) if args.tiny else (10, 20))
    report_paper(r["paper"])
    r["wall_s"] = time.perf_counter() - t0
    normal = max(r["null"][0]["family_wise"], r["joint"]["rows"][0]["joint"])
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
