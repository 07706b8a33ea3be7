"""analysis/checkpoints.py: Appendix A's per-revision means, progress scaling and slopes, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from analysis.checkpoints import checkpoint_revision_means
from sweep.synthetic import (
    expected_checkpoints,
)

# ----------------------------------------------------------------------------
# checkpoints (Appendix A)
# ----------------------------------------------------------------------------


def test_checkpoints_by_hand(paper_grid, paper_analysis):
    c = paper_analysis.stats["checkpoints"]
    exp = expected_checkpoints()
    for key in ("n_fitted_series", "positive_series", "link_recurs_series"):
        assert c[key] == exp[key], key
    ck = paper_grid["checkpoints"]
    ok = ck[ck["status"] == "ok"]
    for name, n_rev in exp["n_revisions"].items():
        got = c["series"][name]
        assert got["n_revisions"] == n_rev
        sub = ok[ok["series"] == name]
        if n_rev < 3:
            assert got["slope_pr_q_minus_pr_k"] is None
            continue
        rev = sub.groupby("revision").agg(t=("tokens", "first"), d=("pr_q_minus_pr_k", "mean"))
        # SPEC §8: training progress = tokens min–max scaled to [0, 1] within the series
        p = (rev["t"] - rev["t"].min()) / (rev["t"].max() - rev["t"].min())
        assert p.min() == 0.0 and p.max() == 1.0
        ref = sps.linregress(p, rev["d"])
        assert got["slope_pr_q_minus_pr_k"] == pytest.approx(ref.slope, rel=1e-9)
        r1 = np.corrcoef(sub["pr_k"], sub["qk_erank"])[0, 1]
        r2 = np.corrcoef(sub["qk_erank"], sub["attn_entropy"])[0, 1]
        assert got["r_pr_k__qk_erank"] == pytest.approx(r1)
        assert got["link_recurs"] == bool(r1 > 0 and r2 > 0)
    assert c["failed_revisions"] == 1


def test_checkpoint_progress_is_min_max_scaled(paper_grid):
    """SPEC §8: progress = (tokens − min) / (max − min) per series, whatever ``progress`` holds;
    steps when tokens are missing; a one-revision series sits at 1."""
    ck = paper_grid["checkpoints"].copy()
    ck["progress"] = np.nan
    revs = checkpoint_revision_means(ck)
    g = revs[revs["series"] == "gpt2-small"].sort_values("progress")
    # tokens are total·(r+1)/5, r = 0..4: min–max gives 0, 1/4, 1/2, 3/4, 1
    assert g["progress"].tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert revs.loc[revs["series"] == "olmo-1b", "progress"].tolist() == [1.0]
    ck["tokens"] = np.nan  # steps, min–max scaled the same way
    g2 = checkpoint_revision_means(ck).query("series == 'gpt2-small'").sort_values("progress")
    assert g2["progress"].tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_the_report_names_the_probe_settings(paper_grid):
    """Appendix A says what the rows were probed with (SPEC §7 "Probe settings"), and says so loudly
    when two series were probed differently; a store without them says they are not recorded."""
    from analysis.checkpoints import compute_checkpoints, sentence

    ck = paper_grid["checkpoints"].copy()
    assert "settings are not recorded" in sentence(compute_checkpoints(ck).result)
    ck = ck.assign(probe_n_seqs=16, probe_seq_len=128, probe_text_sha256="ab" * 32, transformers_version="5.25.0")
    c = compute_checkpoints(ck).result
    assert f"Probed with 16 sequences × 128 tokens of a text with sha256 {'ab' * 6}…, transformers 5.25.0." in sentence(c)
    series = sorted(ck[ck["status"] == "ok"]["series"].unique())
    ck.loc[ck["series"] == series[0], "probe_seq_len"] = 32
    c = compute_checkpoints(ck).result
    assert len(c.probe_settings) == 2 and f"32 tokens of a text with sha256 {'ab' * 6}…, transformers 5.25.0 " \
        f"({series[0]})" in sentence(c)
    assert "probed under 2 different settings, whose values are not comparable" in sentence(c)
