"""analysis/suites.py: Appendix A across the seeds of a checkpoint set, on synthetic store rows (the
end to end on probed tiny GPT-NeoX seeds is tests/test_sweep_extension_suite.py). Each statistic,
test and interval is recomputed here with numpy/scipy from the rows."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from suite_helpers import frame, seed_rows

from analysis import scorecard as sc
from analysis.compute import compute_all
from analysis.inference import FOUND_NEGATIVE, FOUND_POSITIVE, NOT_MEASURED, UNDECIDED
from analysis.suites import fit_sets, init_vs_data, placement
from sweep.store.schema import SCHEMAS
from sweep.synthetic.effects import make_effect_store


def planted_and_null(rng) -> list[dict]:
    rows = []
    for k in range(6):
        rows += seed_rows("planted", str(k), 8.0 + rng.standard_normal(), rng,
                          series="pythia-160m" if k == 0 else None)
        rows += seed_rows("null", str(k), 0.0, rng)
    return rows


@pytest.fixture(scope="module")
def store() -> dict[str, pd.DataFrame]:
    tb = make_effect_store(epochs=12, iv_epochs=4, rng_seed=3)
    rng = np.random.default_rng(0)
    return tb | {"checkpoints": frame(planted_and_null(rng))}


@pytest.fixture(scope="module")
def rows(store) -> dict[str, dict]:
    an = compute_all(store, preset="demo")
    return {r.id: asdict(r) for r in sc.build_scorecard(an, "demo", False)}


def test_a_planted_fall_of_pr_k_in_every_seed_is_decided_and_no_trend_is_not(rows) -> None:
    assert rows["checkpoints.seeds.planted.slope_pr_q_minus_pr_k"]["verdict"] == FOUND_POSITIVE
    assert rows["checkpoints.seeds.planted.slope_pr_k"]["verdict"] == FOUND_NEGATIVE
    for stat in ("slope_pr_q_minus_pr_k", "slope_pr_k"):
        r = rows[f"checkpoints.seeds.null.{stat}"]
        assert r["verdict"] == UNDECIDED and r["seeds_needed_reason"], r
    planted = rows["checkpoints.seeds.planted.slope_pr_q_minus_pr_k"]
    assert (planted["n"], planted["unit"], planted["expected"], planted["family"]) == (6, "seeds", "≠ 0",
                                                                                       "checkpoint seeds")
    assert planted["check"] is not None and planted["short"] == "planted: pr_q − pr_k slope ≠ 0"
    from analysis.claims import SEED_STATISTICS
    from analysis.suites import STATISTICS

    assert list(SEED_STATISTICS) == list(STATISTICS)  # the short labels name the same statistics
    assert "6 seeds (0, 1, 2, 3, 4, 5) varying the seed" in planted["reason"]
    assert "checkpoint seeds, a family of its own" in sc.summary(list(rows.values()))


def test_each_seeds_statistic_and_the_test_recomputed_by_hand(store, rows) -> None:
    ck = store["checkpoints"]
    for group in ("planted", "null"):
        sub = ck[(ck["group"] == group) & (ck["status"] == "ok")]
        slopes, rs = [], []
        for _, one in sub.groupby("seed", sort=True):
            means = one.groupby("step")[["pr_q_minus_pr_k"]].mean()
            x = (means.index - means.index.min()) / (means.index.max() - means.index.min())
            slopes.append(np.polyfit(x, means["pr_q_minus_pr_k"], 1)[0])
            rs.append(np.corrcoef(one["pr_k"], one["qk_erank"])[0, 1])
        row = rows[f"checkpoints.seeds.{group}.slope_pr_q_minus_pr_k"]
        ref = sps.ttest_1samp(slopes, 0.0)
        assert row["value"] == pytest.approx(np.mean(slopes), rel=1e-9) and row["p"] == pytest.approx(ref.pvalue, rel=1e-9)
        r = rows[f"checkpoints.seeds.{group}.r_pr_k__qk_erank"]
        z = np.arctanh(rs)
        assert r["value"] == pytest.approx(np.tanh(z.mean()), rel=1e-9)
        assert r["p"] == pytest.approx(sps.ttest_1samp(z, 0.0).pvalue, rel=1e-9)
    family = [r for r in rows.values() if r["family"] == "checkpoint seeds" and r["p"] is not None]
    assert len(family) == 8  # 2 sets × 4 statistics, Holm over them alone
    from analysis.inference import holm

    assert [r["p_adj"] for r in family] == pytest.approx(holm([r["p"] for r in family]))


def test_where_the_original_falls_among_its_seeds(rows) -> None:
    """The paper's series as seed 0: its rank among the seeds and the others' 95 % prediction interval."""
    note = rows["checkpoints.seeds.planted.slope_pr_q_minus_pr_k"]["reason"]
    assert "the original (the paper's series): pythia-160m ranks " in note and " of 6 (1 = largest)" in note
    assert "the original: null-seed0 ranks" in rows["checkpoints.seeds.null.slope_pr_k"]["reason"]
    y = np.array([3.0, 1.0, 2.0, 4.0, 5.0])
    p = placement(y, 0)
    others = np.array([1.0, 2.0, 4.0, 5.0])
    half = sps.t.ppf(0.975, 3) * others.std(ddof=1) * math.sqrt(1 + 1 / 4)
    assert (p.rank, p.n) == (3, 5) and (p.low, p.high) == pytest.approx((3.0 - half, 3.0 + half))
    assert "inside" in p.text("s", 3.0) and "OUTSIDE" in placement(np.array([9.0, 1.0, 1.1, 0.9]), 0).text("s", 9.0)


def test_a_revision_one_seed_lacks_is_left_out_of_every_seed_and_said(rows) -> None:
    rng = np.random.default_rng(1)
    ck = []
    for k in range(4):
        failed = (4000,) if k == 2 else (1000, 4000, 16000, 64000) if k == 3 else ()
        ck += seed_rows("gappy", str(k), 8.0, rng, failed=failed)
    sets, revs = fit_sets(frame(ck))
    fit = sets["gappy"]
    assert [s.seed for s in fit.seeds] == ["0", "1", "2"]
    assert fit.left_out_seeds == {"3": "2 ok revisions (< 3); failed: step 1000, step 4000, step 16000, step 64000"}
    assert fit.left_out_revisions == {"step 4000": "seed 2"}
    assert fit.revisions == ["step 0", "step 1000", "step 16000", "step 64000", "step 143000"]
    assert all(s.n_revisions == 5 for s in fit.seeds)
    assert set(revs.groupby("seed")["key"].agg(frozenset)) == {frozenset({"0", "1000", "16000", "64000", "143000"})}
    tb = make_effect_store(epochs=12, iv_epochs=4, rng_seed=3) | {"checkpoints": frame(ck)}
    an = compute_all(tb, preset="demo")
    row = {r.id: asdict(r) for r in sc.build_scorecard(an, "demo", False)}["checkpoints.seeds.gappy.slope_pr_k"]
    assert row["n"] == 3 and "seeds left out: seed 3 (2 ok revisions" in row["reason"]
    assert "revisions left out of every seed: step 4000 (lacked by seed 2)" in row["reason"]
    two = [r for r in ck if r["seed"] in ("0", "3")]
    few = {r.id: asdict(r) for r in sc.build_scorecard(
        compute_all(tb | {"checkpoints": frame(two)}, preset="demo"), "demo", False)}
    assert few["checkpoints.seeds.gappy.slope_pr_k"]["verdict"] == NOT_MEASURED
    assert "1 fitted seed(s) (< 3); seeds left out: seed 3" in few["checkpoints.seeds.gappy.slope_pr_k"]["reason"]


def test_a_sets_other_seeds_do_not_count_in_the_papers_count_claims(rows) -> None:
    """checkpoints.positive / .link count heterogeneous series: a set counts once, by its original."""
    r = rows["checkpoints.positive"]
    assert r["n"] == 2 and r["unit"] == "series"  # each set's seed 0
    assert "10 further seed(s) of sets left out" in r["reason"] and "local series" not in r["reason"]


def test_the_spread_across_weight_seeds_beside_that_across_data_orders() -> None:
    rng = np.random.default_rng(2)
    ck = []
    for k in range(1, 6):
        ck += seed_rows("w", str(k), 8.0 + 3.0 * rng.standard_normal(), rng, varies="weights")
    for k in range(1, 5):
        ck += seed_rows("d", str(k), 8.0 + 0.5 * rng.standard_normal(), rng, varies="data order")
    ck += seed_rows("d2", "1", 8.0, rng, varies="data order") + seed_rows("d2", "2", 7.0, rng, varies="data order")
    sets, _ = fit_sets(frame(ck))
    spreads = {(s.data_set, s.statistic): s for s in init_vs_data(sets)}
    s = spreads[("d", "slope_pr_k")]
    w, d = sets["w"].values("slope_pr_k"), sets["d"].values("slope_pr_k")
    ratio = w.var(ddof=1) / d.var(ddof=1)
    assert s.sd_weights == pytest.approx(w.std(ddof=1)) and s.ratio == pytest.approx(math.sqrt(ratio))
    p = 2 * min(sps.f.cdf(ratio, 4, 3), sps.f.sf(ratio, 4, 3))
    assert s.tested and s.p == pytest.approx(p)
    assert s.sd_weights_low == pytest.approx(w.std(ddof=1) * math.sqrt(4 / sps.chi2.ppf(0.975, 4)))
    assert s.ratio_low == pytest.approx(math.sqrt(ratio / sps.f.ppf(0.975, 4, 3)))
    assert spreads[("d", "r_pr_k__qk_erank")].scale == "Fisher z"
    few = spreads[("d2", "slope_pr_k")]  # two data orders: an interval, no test
    assert not few.tested and few.p is None and few.n_data == 2 and few.sd_data is not None
    from analysis.suites import SeedSetsResult, sets_sentences

    text = " ".join(sets_sentences(SeedSetsResult(sets, init_vs_data(sets))))
    assert "Init or data order (w vs d; w vs d2;" in text and "descriptive: fewer than 3 seeds in a set (5 and 2)" in text


def test_rows_of_older_stores_have_no_sets() -> None:
    sets, revs = fit_sets(SCHEMAS["checkpoints"].empty_table().to_pandas())
    assert sets == {} and revs.empty
    sets, revs = fit_sets(frame(seed_rows("x", "0", 1.0, np.random.default_rng(0))).assign(group=None, seed=None))
    assert sets == {} and revs.empty


def test_the_report_writes_the_sets_section_and_says_why_a_table_is_absent(store, tmp_path) -> None:
    """A store with sets gets the section (its table and prose); without a weights-only set beside
    a data-order-only one, the init-or-data table's own reason is given, not the section's."""
    from analysis.suites import NO_PAIR
    from sweep import report

    s = report.build_report(store, tmp_path, figures=False, preset="demo")  # figA_sets: test_sweep_report_figures
    assert set(s["checkpoint_sets"]["sets"]) == {"planted", "null"}
    assert (tmp_path / "tables" / "appendixA_sets.csv").is_file()
    assert not (tmp_path / "tables" / "appendixA_init_vs_data.csv").exists()
    assert s["missing"]["tables.appendixA_init_vs_data"] == NO_PAIR and "checkpoint_sets" not in s["missing"]
    md = (tmp_path / "report.md").read_text()
    assert "## Appendix A — across seeds (sets of checkpoint series)" in md and "Set planted (seeds vary" in md


def test_the_console_gives_the_seeds_family_its_own_line(rows) -> None:
    lines = sc.console(list(rows.values()), "demo")
    assert lines[3] == ("  checkpoint seeds, a family of its own: direction found: positive 5, direction found: negative 1, "
                        "undecided 2 (family of 8 tested claims, Holm at 5%)")
    row = next(line for line in lines if line.strip().startswith("planted: pr_k slope ≠ 0"))
    assert row.rstrip().endswith("direction found: negative") and max(map(len, lines)) <= sc.WIDTH
