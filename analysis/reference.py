"""The paper's reference values (SPEC §9 and the paper's Appendix A), in one place."""

from __future__ import annotations

#: SPEC §9 (and Appendix A of the paper): reference values at paper scale, WikiText-103.
PAPER_REFERENCE: dict = {
    "alignment": {
        "initial": {
            "qk_identical": 1.0,
            "disjoint_support_xavier": 0.0,
            "independent_xavier": 0.0498,
        },
        "final": {
            "qk_identical": {"mean": 0.4530, "sd": 0.0950},
            "disjoint_support_xavier": {"mean": 0.1991, "sd": 0.0151},
            "independent_xavier": {"mean": 0.1895, "sd": 0.0227},
        },
        "welch_p": 1.06e-6,
        "hedges_g": 4.489,
        "gap_by_depth": {"4": 0.143, "8": 0.314},
    },
    "layer_categories": {
        "mid": {"attn_entropy": 1.532, "attn_top1": 0.514, "qk_erank": 6.26, "pr_q": 10.52},
        "late": {"qk_erank": 16.34, "pr_q": 24.41},
    },
    "slopes": {
        "pooled": {
            "pr_k": {"negative": 50, "n": 54},
            "pr_q_minus_pr_k": {"positive": 54, "n": 54},
        }
    },
    "bridge": {
        "seed_averaged": {
            "key_spec__qk_compression": {"r": 0.840, "p": 1.5e-10, "n": 36},
            "qk_compression__entropy_sharpening": {"r": 0.769, "p": 4.3e-8, "n": 36},
            "qk_compression__top1_sharpening": {"r": 0.637, "p": 3.0e-5, "n": 36},
        },
        "per_seed": {
            "key_spec__qk_compression": {"r": 0.781, "p": 8.32e-31, "n": 144},
            "qk_compression__entropy_sharpening": {"r": 0.614, "p": 2.73e-16, "n": 144},
            "qk_compression__top1_sharpening": {"r": 0.488, "p": 5.43e-10, "n": 144},
        },
    },
    "interventions": {
        "forced_k_contraction": {
            "attn_entropy": 2.0809,
            "logit_std": 5.4071,
            "qk_erank": 6.03,
            "confidence": 1.0,
        },
        "freeze_k": {"attn_entropy": 2.6002, "logit_std": 3.2136, "confidence": 1.0},
        "k_spectrum_clamp": {"confidence": 1.0},
        "val_loss_range": [1.2066, 1.2270],
        "n_seeds": 5,
    },
    "checkpoints": {"positive_series": 1, "n_fitted_series": 6, "link_recurs_series": 4},
}

#: The checkpoint series the paper's Appendix A probed, by their names in the store (the registry's
#: default selection, ``sweep.extension.checkpoint_series``: a test checks they agree).
PAPER_SERIES: tuple[str, ...] = ("gpt2-small", "pythia-70m", "pythia-160m", "pythia-410m", "smollm2-135m",
                                 "smollm2-360m", "olmo-1b")


#: The scorecard's "paper" column, per claim id: the paper's value of the *same quantity* as the
#: row's own (``Claim.kind``: a level, a difference, a change, a count, a correlation), with the
#: numbers it is derived from. Where the paper states only a sign (or a level where the row
#: measures a change), the text says "sign only". Interventions are formatted in
#: ``analysis.claims`` from ``PAPER_REFERENCE``; alignment.final.* too.
PAPER_TEXT: dict[str, str] = {
    "alignment.initial": "0.975 (1.0000 − mean of 0.0000 and 0.0498)",
    "alignment.contrast": "0.259 (0.4530 − mean of 0.1991 and 0.1895; Welch p 1.06e-6, g 4.489)",
    "alignment.gap.L4": "0.143",
    "alignment.gap.L8": "0.314",
    "alignment.gap.growth": "0.171 (0.143 at 4 → 0.314 at 8 layers)",
    "slopes.pr_q_minus_pr_k": "> 0, sign only (the paper counts traces: 54/54 seed-averaged traces rise)",
    "slopes.pr_k": "< 0, sign only (the paper counts traces: 50/54 seed-averaged traces fall)",
    "categories.late_mid.qk_erank": "10.08 (16.34 − 6.26)",
    "categories.late_mid.pr_q": "13.89 (24.41 − 10.52)",
    "categories.early_mid.attn_entropy": "> 0, sign only (the paper gives mid's level, 1.532)",
    "categories.early_mid.qk_erank": "> 0, sign only (the paper gives mid's level, 6.26)",
    "bridge.key_spec__qk_compression": "> 0 (the paper: r = 0.840 over 36 seed-averaged cells, 0.781 over 144 pooled trajectories)",
    "bridge.qk_compression__entropy_sharpening": "> 0 (the paper: r = 0.769 over 36 seed-averaged cells, 0.614 over 144)",
    "bridge.qk_compression__top1_sharpening": "> 0 (the paper: r = 0.637 over 36 seed-averaged cells, 0.488 over 144)",
    "interventions.freeze_q.attn_entropy": "> 0, sign only (softens attention; no number)",
    "interventions.val_loss": "1.2066–1.2270",
    "checkpoints.positive": "0.17 (1/6 series)",
    "checkpoints.link": "0.67 (4/6 series)",
    "checkpoints.gpt2_burst": "burst, then decay",
}

#: The paper's value of a row's quantity, where the paper gives the same quantity: the magnitude
#: column at paper scale asks whether it lies inside this run's 95 % interval (SPEC §8). Rows whose
#: quantity the paper does not report (a sign only, a level where the row is a change, a statistic
#: over other units) have none.
_A, _C = PAPER_REFERENCE["alignment"], PAPER_REFERENCE["layer_categories"]
_CK = PAPER_REFERENCE["checkpoints"]
PAPER_VALUE: dict[str, float] = {
    "alignment.contrast": _A["final"]["qk_identical"]["mean"]
    - (_A["final"]["disjoint_support_xavier"]["mean"] + _A["final"]["independent_xavier"]["mean"]) / 2,
    "alignment.gap.L4": _A["gap_by_depth"]["4"],
    "alignment.gap.L8": _A["gap_by_depth"]["8"],
    "alignment.gap.growth": _A["gap_by_depth"]["8"] - _A["gap_by_depth"]["4"],
    "categories.late_mid.qk_erank": _C["late"]["qk_erank"] - _C["mid"]["qk_erank"],
    "categories.late_mid.pr_q": _C["late"]["pr_q"] - _C["mid"]["pr_q"],
    "checkpoints.positive": _CK["positive_series"] / _CK["n_fitted_series"],
    "checkpoints.link": _CK["link_recurs_series"] / _CK["n_fitted_series"],
}
