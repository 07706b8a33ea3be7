"""Checkpoint rows of a set of seeds, as the store holds them, for the tests of Appendix A across seeds
(test_analysis_suites.py, test_sweep_report_figures.py)."""

from __future__ import annotations

import pandas as pd

from sweep.synthetic.tables import _conform

STEPS = (0, 1000, 4000, 16000, 64000, 143000)


def seed_rows(group: str, seed: str, trend: float, rng, varies: str = "seed", series: str | None = None,
              steps=STEPS, failed=(), layers: int = 3) -> list[dict]:
    """One seed's rows: pr_k falls by ``trend`` over training (plus noise), pr_q stays; ``failed``:
    steps recorded as failed revisions."""
    name = series or f"{group}-seed{seed}"
    out = []
    top = max(steps)
    for step in steps:
        base = {"series": name, "repo": f"org/{name}", "revision": f"step{step}", "step": step,
                "tokens": step * 2_097_152, "progress": step / top, "group": group, "seed": seed, "varies": varies,
                "schema_version": 1}
        if step in failed:
            out.append({**base, "layer": None, "status": "failed", "reason": "RevisionError: revision missing"})
            continue
        for layer in range(layers):
            pr_k = 20.0 - trend * step / top + layer + 0.3 * rng.standard_normal()
            pr_q = 25.0 + layer + 0.3 * rng.standard_normal()
            qk = 2.0 + 0.5 * pr_k + 0.2 * rng.standard_normal()
            out.append({**base, "layer": layer, "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k,
                        "qk_erank": qk, "attn_entropy": 1.0 + 0.1 * qk + 0.05 * rng.standard_normal(),
                        "attn_top1": 0.3, "attn_erank": 4.0, "logit_std": 3.0, "status": "ok"})
    return out


def frame(rows: list[dict]) -> pd.DataFrame:
    return _conform(pd.DataFrame(rows), "checkpoints")


