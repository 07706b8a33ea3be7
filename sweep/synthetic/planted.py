"""What the synthetic store plants (``Planted``, the grid, the checkpoint series) and the
statistics that follow from it (``expected_slope_counts``, ``expected_checkpoints``)."""


from __future__ import annotations

from dataclasses import dataclass, field

from interventions import CONTROL, PAPER_CONDITIONS
from model.qk_init import PAPER_INITS, QK_INITS

# The grid comes from the registries: the paper's regimes and conditions.
INITS = PAPER_INITS
UNCOUPLED = tuple(i for i in INITS if not QK_INITS[i].coupled)
COUPLED = tuple(i for i in INITS if QK_INITS[i].coupled)
CONDITIONS = PAPER_CONDITIONS
IV_SEEDS = (7, 37, 42, 105, 210)
#: Planted per-head alignment offsets (4 heads, mean 0): head h of a baseline row has
#: ``qk_alignment + HEAD_OFFSETS[h]``.
HEAD_OFFSETS = (-0.03, -0.01, 0.01, 0.03)


def _default_effects() -> dict[str, dict[str, float]]:
    return {
        CONTROL: {},
        "forced_k_contraction": {
            "attn_entropy": -0.30,
            "logit_std": +1.40,
            "qk_erank": -2.0,
            "pr_k": -3.0,
            "val_loss": +0.010,
        },
        "k_spectrum_clamp": {
            "attn_entropy": +0.20,
            "logit_std": -0.80,
            "qk_erank": +3.0,
            "pr_k": +2.0,
            "val_loss": +0.004,
        },
        "freeze_k": {
            "attn_entropy": +0.25,
            "logit_std": -0.90,
            "qk_erank": +2.5,
            "pr_k": +1.0,
            "val_loss": +0.015,
        },
        "freeze_q": {
            "attn_entropy": +0.10,
            "logit_std": -0.20,
            "qk_erank": +0.5,
            "val_loss": +0.008,
        },
        "qk_align_reg": {"attn_entropy": +0.01, "logit_std": -0.02, "qk_erank": +0.05},
    }


@dataclass(frozen=True)
class Planted:
    """Known structure planted in the synthetic store (see the module docstring)."""

    pr_q_slope: float = 0.10  # per epoch at 45 epochs (rescaled to keep the same total change)
    pr_k_slope: float = -0.06
    coupled_pr_k_reversal_layers: tuple[int, ...] = (0,)
    reversal_pr_k_slope: float = 0.04
    inverted_cells: tuple[tuple[str, int, int], ...] = (("disjoint_support_xavier", 4, 3),)
    coupled_final: float = 0.25
    coupled_final_per_layer: float = 0.03
    uncoupled_final: tuple[tuple[str, float], ...] = (
        ("independent_xavier", 0.19),
        ("disjoint_support_xavier", 0.20),
    )
    #: initial alignment of uncoupled inits other than 0.0499 (coupled inits start at 1)
    uncoupled_initial: tuple[tuple[str, float], ...] = (("disjoint_support_xavier", 0.0),)
    alignment_run_sd: float = 0.015
    noise_sd: float = 0.01
    effects: dict = field(default_factory=_default_effects, hash=False, compare=False)
    violations: tuple[tuple[str, int, str], ...] = (
        ("forced_k_contraction", 1, "logit_std"),
        ("k_spectrum_clamp", 0, "qk_erank"),
        ("k_spectrum_clamp", 0, "attn_entropy"),
        ("freeze_q", 2, "attn_entropy"),
        ("freeze_q", 3, "attn_entropy"),
    )

    def cell_signs(self, init: str, depth: int, layer: int) -> dict[str, float]:
        """Planted slope (before the per-cell latent scaling) of pr_q and pr_k in a cell."""
        q, k = self.pr_q_slope, self.pr_k_slope
        if init in COUPLED and layer in self.coupled_pr_k_reversal_layers:
            k = self.reversal_pr_k_slope
        if (init, depth, layer) in self.inverted_cells:
            q, k = -self.pr_q_slope, self.pr_k_slope / 3.0
        return {"pr_q": q, "pr_k": k}


def expected_slope_counts(depths=(4, 6, 8), planted: Planted | None = None, inits=INITS) -> dict:
    """Counts of positive/negative seed-averaged slopes that the planted cells imply."""
    p = planted or Planted()
    groups = {"uncoupled": UNCOUPLED, "coupled": COUPLED, "pooled": INITS}
    out: dict = {}
    for g, members in groups.items():
        out[g] = {
            m: {"positive": 0, "negative": 0, "n": 0} for m in ("pr_q", "pr_k", "pr_q_minus_pr_k")
        }
        for init in members:
            if init not in inits:
                continue
            for d in depths:
                for layer in range(d):
                    s = p.cell_signs(init, d, layer)
                    vals = {
                        "pr_q": s["pr_q"],
                        "pr_k": s["pr_k"],
                        "pr_q_minus_pr_k": s["pr_q"] - s["pr_k"],
                    }
                    for m, v in vals.items():
                        out[g][m]["n"] += 1
                        out[g][m]["positive" if v > 0 else "negative"] += 1
    return out


#: series -> (n_layers, revisions, sign of the pr_q − pr_k slope, link holds)
CHECKPOINT_SERIES = {
    "gpt2-small": (12, 5, +1, True),
    "pythia-70m": (6, 4, -1, True),
    "pythia-160m": (12, 3, -1, False),
    "olmo-1b": (16, 1, -1, True),
}


def expected_checkpoints() -> dict:
    """What ``CHECKPOINT_SERIES`` implies for Appendix A."""
    fitted = {k: v for k, v in CHECKPOINT_SERIES.items() if v[1] >= 3}
    return {
        "n_fitted_series": len(fitted),
        "positive_series": sum(v[2] > 0 for v in fitted.values()),
        "link_recurs_series": sum(v[3] for v in fitted.values()),
        "n_revisions": {k: v[1] for k, v in CHECKPOINT_SERIES.items()},
    }
