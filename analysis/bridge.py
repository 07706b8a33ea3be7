"""SPEC §8 mechanism bridge: correlations between key specialisation, Q/K compression and sharpening."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.frames import baseline
from analysis.primitives import Section, pearson
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
    """Add the four bridge columns (sign · slope / mean) to a slopes frame."""
    out = slopes.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, (metric, sign) in BRIDGE_QUANTITIES.items():
            v = sign * out[f"{metric}_slope"].astype(float) / out[f"{metric}_mean"].astype(float)
            out[name] = v.where(np.isfinite(v))
    return out


def bridge_points(layers: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The bridge quantities per uncoupled seed-averaged cell and per uncoupled run trajectory."""
    metrics = [m for m, _ in BRIDGE_QUANTITIES.values()]
    base = baseline(layers)
    unc = base[base["init"].isin(vocab.uncoupled_inits())]
    return {
        "seed_averaged": bridge_quantities(trace_slopes(unc, metrics)),
        "per_seed": bridge_quantities(run_slopes(unc, metrics)),
    }


def bridge_section(layers: pd.DataFrame) -> Section:
    """Figure 3: Pearson r, p, n of the three bridge pairs, seed-averaged and per seed."""
    base = baseline(layers)
    if base.empty or not base["init"].isin(vocab.uncoupled_inits()).any():
        return Section({}, {"bridge": "no uncoupled baseline runs in the store"})
    pts = bridge_points(layers)
    out: dict = {}
    missing: dict[str, str] = {}
    for level, frame in pts.items():
        out[level] = {}
        for a, b in BRIDGE_PAIRS:
            key = f"{a}__{b}"
            if frame.empty:
                out[level][key] = {"r": None, "p": None, "n": 0, "note": "no trajectories"}
            else:
                out[level][key] = pearson(frame[a], frame[b])
            if out[level][key]["r"] is None:
                missing[f"bridge.{level}.{key}"] = out[level][key].get("note", "undefined")
    return Section({"bridge": out}, missing, pts)
