"""SPEC §8 mechanism bridge: correlations between key specialisation, Q/K compression and sharpening."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import claims
from analysis import vocabulary as vocab
from analysis.frames import baseline, post_collapse_start
from analysis.primitives import Correlation, fmt, fmt_p, to_jsonable
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section
from analysis.slopes import run_slopes, trace_slopes

#: Mechanism-bridge quantities: name -> (metric, sign); value = sign * slope / mean.
BRIDGE_QUANTITIES: dict[str, tuple[str, float]] = {
    "key_spec": ("pr_k", -1.0),
    "qk_compression": ("qk_erank", -1.0),
    "entropy_sharpening": ("attn_entropy", -1.0),
    "top1_sharpening": ("attn_top1", +1.0),
}
BRIDGE_PAIRS: tuple[tuple[str, str], ...] = (
    ("key_spec", "qk_compression"),
    ("qk_compression", "entropy_sharpening"),
    ("qk_compression", "top1_sharpening"),
)


def bridge_quantities(slopes: pd.DataFrame) -> pd.DataFrame:
    """Add the four bridge columns (sign · slope / mean) to a slopes frame, and ``<name>_post`` over the
    post-collapse window where the frame has its columns."""
    out = slopes.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        for suffix in ("", "_post"):
            for name, (metric, sign) in BRIDGE_QUANTITIES.items():
                if f"{metric}_slope{suffix}" not in out:
                    continue
                v = sign * out[f"{metric}_slope{suffix}"].astype(float) / out[f"{metric}_mean{suffix}"].astype(float)
                out[f"{name}{suffix}"] = v.where(np.isfinite(v))
    return out


def bridge_points(layers: pd.DataFrame, start: int | None) -> dict[str, pd.DataFrame]:
    """The bridge quantities per uncoupled seed-averaged cell and per uncoupled run trajectory, over
    every logged epoch and over the post-collapse window from epoch ``start`` (SPEC §8)."""
    metrics = [m for m, _ in BRIDGE_QUANTITIES.values()]
    base = baseline(layers)
    unc = base[base["init"].isin(vocab.uncoupled_inits())]
    return {
        "seed_averaged": bridge_quantities(trace_slopes(unc, metrics, start)),
        "per_seed": bridge_quantities(run_slopes(unc, metrics, start)),
    }


#: pair "a__b" -> its correlation
Pairs = dict[str, Correlation]


@dataclass
class BridgeResult(Result):
    """Figure 3: Pearson r of the three bridge pairs, over uncoupled seed-averaged cells and per seed."""

    key = "bridge"
    seed_averaged: Pairs
    per_seed: Pairs
    #: the same over the post-collapse window (SPEC §8): a sensitivity of the paper's every-epoch fit
    seed_averaged_post: Pairs | None = None
    per_seed_post: Pairs | None = None
    collapse_end: int | None = None
    collapse_source: str = ""
    collapse_fixed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"bridge": to_jsonable({"seed_averaged": self.seed_averaged, "per_seed": self.per_seed}),
                "bridge_post_collapse": to_jsonable({"collapse_end": self.collapse_end,
                                                     "seed_averaged": self.seed_averaged_post,
                                                     "per_seed": self.per_seed_post,
                                                     "source": self.collapse_source,
                                                     "fixed_before_the_data": self.collapse_fixed})}


def compute_bridge(layers: pd.DataFrame, window=None) -> Computed[BridgeResult]:
    """Figure 3: Pearson r, p, n of the three bridge pairs, seed-averaged and per seed."""
    base = baseline(layers)
    if base.empty or not base["init"].isin(vocab.uncoupled_inits()).any():
        return Computed(None, {"bridge": "no uncoupled baseline runs in the store"})
    start, source, fixed = post_collapse_start(base, window)
    pts = bridge_points(layers, start)
    out: dict[str, Pairs | None] = {}
    missing: dict[str, str] = {}
    for level, frame in pts.items():
        for suffix in ("", "_post"):
            if suffix and start is None:
                out[f"{level}{suffix}"] = None
                continue
            pairs: Pairs = {}
            for a, b in BRIDGE_PAIRS:
                key = f"{a}__{b}"
                if frame.empty:
                    pairs[key] = Correlation(None, None, 0, "no trajectories")
                else:
                    pairs[key] = Correlation.of(frame[f"{a}{suffix}"], frame[f"{b}{suffix}"])
                if pairs[key].r is None and not suffix:
                    missing[f"bridge.{level}.{key}"] = pairs[key].note or "undefined"
            out[f"{level}{suffix}"] = pairs
    return Computed(BridgeResult(**out, collapse_end=start, collapse_source=source, collapse_fixed=fixed), missing, pts)


def table(b: BridgeResult) -> pd.DataFrame:
    """Pearson r, p, n of the three bridge pairs at both levels, over every logged epoch (the paper's
    definition) and, beside it, r over the post-collapse window."""
    rows = []
    for level, pairs, post in (("seed_averaged", b.seed_averaged, b.seed_averaged_post),
                               ("per_seed", b.per_seed, b.per_seed_post)):
        for pair, d in pairs.items():
            rows.append({"level": level, "pair": pair, "r": d.r, "p": d.p, "n": d.n,
                         "r_post_collapse": (post or {}).get(pair, Correlation(None, None, 0)).r})
    return pd.DataFrame(rows)


def sentence(b: BridgeResult) -> str:
    """The three correlations at both levels."""
    out = []
    for pairs, name in (
        (b.seed_averaged, "uncoupled seed-averaged cells"),
        (b.per_seed, "per-seed trajectories"),
    ):
        rs = []
        for pair, d in pairs.items():
            a, c = pair.split("__")
            rs.append(f"{a} vs {c} r = {fmt(d.r)} (p = {fmt_p(d.p)})")
        n = max(d.n for d in pairs.values())
        out.append(f"Over {n} {name}: " + "; ".join(rs) + ".")
    if b.seed_averaged_post:
        rs = [f"{fmt(d.r)}" for d in b.seed_averaged_post.values()]
        out.append(f"Over the post-collapse window (epochs ≥ {b.collapse_end}, {b.collapse_source}; SPEC §8) "
                   f"the seed-averaged r are {', '.join(rs)}: whether the correlations rest on the first epochs.")
    out.append("The p-values treat cells (or trajectories) as independent, which seeds are not: they are "
               "descriptive; the scorecard tests each correlation with the seed as the unit.")
    return " ".join(out)


class Bridge(Section[BridgeResult]):
    """SPEC §8 mechanism bridge (Figure 3)."""

    name = "bridge"
    heading = "Mechanism bridge (Figure 3)"
    reads = ("baseline",)
    table_names = ("bridge",)
    figures = (Figure("fig3_bridge", "Figure 3 — mechanism bridge over uncoupled seed-averaged cells, "
                      "with OLS lines", "sweep.report.figures:fig3_bridge"),)

    def compute(self, data: Inputs) -> Computed[BridgeResult]:
        return compute_bridge(data.layers, data.window)

    def tables(self, result: BridgeResult) -> dict[str, pd.DataFrame | None]:
        return {"bridge": table(result)}

    def prose(self, result: BridgeResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.bridge_claims(an)


SECTION = Bridge()
