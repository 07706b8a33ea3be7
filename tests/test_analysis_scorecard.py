"""analysis/scorecard.py: the verdicts of the reproduction scorecard and what each row says.

Stores come from ``sweep.synthetic.effects`` (a chosen effect per claim, none elsewhere) and
``sweep.synthetic`` (the paper grid with planted structure). Values, intervals and p-values are
recomputed here from the raw tables with pandas/numpy and Student's t from ``scipy.special``.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
from scipy import special

from analysis import scorecard as sc
from analysis.compute import compute_all
from analysis.inference import (
    CANNOT,
    FAILS,
    HOLDS,
    NOT_MEASURED,
    REPRODUCED,
    REVERSED,
    UNDECIDED,
    holm,
)
from analysis.section import Window
from sweep.synthetic import make_synthetic_store
from sweep.synthetic.effects import make_effect_store


def _rows(tb: dict, preset: str = "demo", sequential: dict | None = None) -> dict[str, dict]:
    an = compute_all(tb, preset=preset)
    return {r.id: asdict(r) for r in sc.build_scorecard(an, preset, paper_scale=preset == "paper",
                                                         sequential=sequential)}


#: Every counted claim of the demo's grid, each planted against its expected side, in stores whose
#: claims do not move one another (one store per group). The dose–response's claims exist only with
#: a strength sweep: tests/test_analysis_dose_response.py falsifies them.
FALSE = [
    {"alignment.final.independent_xavier": -0.1, "slopes.pr_k": +0.1, "slopes.pr_q_minus_pr_k": -0.1,
     "categories.late_mid.qk_erank": -1.0, "categories.late_mid.pr_q": -1.0,
     "categories.early_mid.attn_entropy": -0.4, "categories.early_mid.qk_erank": -1.0,
     "bridge.key_spec__qk_compression": -0.9, "bridge.qk_compression__entropy_sharpening": -0.9,
     "bridge.qk_compression__top1_sharpening": -0.9,
     "interventions.forced_k_contraction.attn_entropy": +0.3, "interventions.forced_k_contraction.logit_std": -1.0,
     "interventions.forced_k_contraction.qk_erank": +3.0, "interventions.k_spectrum_clamp.attn_entropy": -0.3,
     "interventions.k_spectrum_clamp.logit_std": +1.0, "interventions.k_spectrum_clamp.qk_erank": -3.0,
     "interventions.freeze_k.attn_entropy": -0.3, "interventions.freeze_k.logit_std": +1.0,
     "interventions.freeze_k.qk_erank": -3.0, "interventions.freeze_q.attn_entropy": -0.3,
     "checkpoints.positive": 1.0, "checkpoints.link": 0.0},
    {"alignment.contrast": -0.15},
    {"alignment.gap.L1": -0.15, "alignment.gap.L2": -0.15, "alignment.gap.L3": -0.15},
    {"alignment.gap.growth": -0.3},
]


@pytest.fixture(scope="module")
def falsified() -> list[dict[str, dict]]:
    return [_rows(make_effect_store(effects, n_series=12, epochs=12, iv_epochs=4, rng_seed=k))
            for k, effects in enumerate(FALSE)]


def test_every_counted_claim_is_reversed_in_a_store_where_it_is_false(falsified) -> None:
    counted = {i for i, r in falsified[0].items() if r["block"] == "counted" and r["verdict"] != NOT_MEASURED}
    planted = {c for group in FALSE for c in group}
    assert counted <= planted, f"counted claims no store falsifies: {sorted(counted - planted)}"
    for group, rows in zip(FALSE, falsified, strict=True):
        for cid in group:
            assert rows[cid]["verdict"] == REVERSED, (cid, rows[cid]["value"], rows[cid]["p_adj"])


def test_true_effects_are_reproduced() -> None:
    true = {cid: -v if isinstance(v, float) and cid.split(".")[0] != "checkpoints" else 1.0 - v
            for cid, v in FALSE[0].items()}
    rows = _rows(make_effect_store(true, n_series=12, epochs=12, iv_epochs=4, rng_seed=9))
    for cid in true:
        assert rows[cid]["verdict"] == REPRODUCED, (cid, rows[cid]["value"], rows[cid]["p_adj"])


@pytest.fixture(scope="module")
def null_store() -> dict:
    return make_effect_store(epochs=12, iv_epochs=4, rng_seed=3)


@pytest.fixture(scope="module")
def null_rows(null_store) -> dict[str, dict]:
    return _rows(null_store)


def test_a_store_with_no_effect_decides_nothing_and_its_sanity_checks_hold(null_rows) -> None:
    rows = null_rows
    counted = [r for r in rows.values() if r["block"] == "counted" and r["verdict"] != NOT_MEASURED]
    assert len(counted) == 25 and all(r["verdict"] == UNDECIDED for r in counted)
    sanity = {i: r for i, r in rows.items() if r["block"] == "sanity"}
    assert set(sanity) == {"alignment.initial", "alignment.final.qk_identical",
                           "alignment.final.disjoint_support_xavier"}
    assert all(r["verdict"] == HOLDS and r["p_adj"] is None for r in sanity.values())
    assert rows["alignment.final.independent_xavier"]["block"] == "counted"  # a random start: evidence


def test_values_intervals_and_holm_recomputed_by_hand() -> None:
    tb = make_effect_store({"interventions.freeze_k.logit_std": -0.15, "slopes.pr_q_minus_pr_k": 0.02},
                           epochs=12, iv_epochs=4, rng_seed=4)
    rows = _rows(tb)
    lay = tb["layers"]
    # freeze_k's logit_std: per seed, final layer-mean under freeze_k − under none
    iv = lay[(lay["sweep"] == "interventions") & (lay["epoch"] == 4)]
    means = iv.groupby(["condition", "seed"])["logit_std"].mean()
    d = (means.loc["freeze_k"] - means.loc["none"]).to_numpy()
    # slopes: per seed, the mean over its layer trajectories of the OLS slope of pr_q − pr_k
    base = lay[lay["sweep"] == "baseline"]
    per_traj = base.groupby(["seed", "init", "depth", "layer"]).apply(
        lambda g: np.polyfit(g["epoch"], g["pr_q_minus_pr_k"], 1)[0], include_groups=False)
    s = per_traj.groupby("seed").mean().to_numpy()
    for cid, y in (("interventions.freeze_k.logit_std", d), ("slopes.pr_q_minus_pr_k", s)):
        n, mean, sd = y.size, y.mean(), y.std(ddof=1)
        t = mean / (sd / math.sqrt(n))
        half = special.stdtrit(n - 1, 0.975) * sd / math.sqrt(n)
        row = rows[cid]
        assert row["value"] == pytest.approx(mean, rel=1e-9) and row["n"] == n == 6
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(mean - half, rel=1e-9), pytest.approx(mean + half, rel=1e-9))
        assert row["p"] == pytest.approx(2 * special.stdtr(n - 1, -abs(t)), rel=1e-9) and row["test"] == "t, 5 df"
    family = [r for r in rows.values() if r["block"] == "counted" and r["p"] is not None]
    assert [r["p_adj"] for r in family] == pytest.approx(holm([r["p"] for r in family]))


def test_post_collapse_column_on_the_slope_and_bridge_rows(null_store, null_rows) -> None:
    """A window chosen on the runs it describes is shown, not tested; one fixed before the data
    (the preset's e_c) is tested, and the report says where it comes from."""
    rows = null_rows
    for cid in ("slopes.pr_k", "bridge.key_spec__qk_compression"):
        assert rows[cid]["post_value"] is not None and rows[cid]["post_p"] is None, cid
        assert "post-collapse window chosen on these runs: descriptive" in rows[cid]["reason"]
    assert rows["alignment.contrast"]["post_value"] is None
    an = compute_all(null_store, preset="demo", window=Window(3, "fixed with the test"))
    fixed = {r.id: asdict(r) for r in sc.build_scorecard(an, "demo", False)}
    for cid in ("slopes.pr_k", "bridge.key_spec__qk_compression"):
        assert fixed[cid]["post_p"] is not None and "descriptive" not in (fixed[cid]["reason"] or ""), cid
    assert an.stats["slopes_post_collapse"]["collapse_end"] == 3
    assert an.stats["bridge_post_collapse"]["source"] == "fixed with the test"
    assert an.stats["slopes_post_collapse"]["fixed_before_the_data"] is True


def test_a_claim_decided_by_seeds_auto_takes_that_decision_and_leaves_the_family(null_store, null_rows) -> None:
    tb, plain = null_store, null_rows
    record = {"interventions.freeze_k.qk_erank": {"outcome": "as predicted", "text": "as predicted, decided at 3 seeds "
                                         "(look 1 of 4)", "experiment": "interventions-demo-auto", "estimate": 0.8,
                                         "n": 3, "ci_adj_low": 0.2, "ci_adj_high": 1.4}}
    rows = _rows(tb, sequential=record)
    line = next(ln for ln in sc.render_text(list(rows.values())) if ln.startswith("freeze_k: qk_erank"))
    assert "0.8 [0.2, 1.4]" in line and "3 seeds" in line  # the interval at its deciding look, and its seeds
    assert "1 claims decided by --seeds auto, in its own family" in sc.summary(list(rows.values()))
    row = rows["interventions.freeze_k.qk_erank"]
    assert row["verdict"] == REPRODUCED and row["p_adj"] is None and row["test"] == "--seeds auto"
    assert "--seeds auto: as predicted, decided at 3 seeds" in row["reason"]
    assert plain["interventions.freeze_k.qk_erank"]["verdict"] == UNDECIDED
    assert sum(r["p_adj"] is not None for r in rows.values()) == sum(r["p_adj"] is not None for r in plain.values()) - 1


def test_missing_sections_are_not_measured_with_a_reason():
    tb = make_synthetic_store(n_seeds=2, epochs=5, interventions=False, checkpoints=False)
    rows = _rows(tb, preset="paper")
    iv = [r for r in rows.values() if r["section"] == "interventions"]
    ck = [r for r in rows.values() if r["section"] == "checkpoints"]
    assert iv and ck
    for r in iv + ck:
        assert r["verdict"] == NOT_MEASURED and r["value"] is None and r["reason"], r["id"]
    assert rows["alignment.contrast"]["verdict"] != NOT_MEASURED


def test_paper_scale_adds_the_magnitude_column():
    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5), preset="paper")
    # planted coupled final 0.25 + 0.03·depth ≈ 0.43 (inside 0.453 ± 0.095); uncoupled 0.19 / 0.20
    for init in ("qk_identical", "independent_xavier", "disjoint_support_xavier"):
        assert rows[f"alignment.final.{init}"]["within_paper_spread"] is True, init
        assert rows[f"alignment.final.{init}"]["magnitude"] == "consistent"
    late = rows["categories.late_mid.qk_erank"]  # the paper's 10.08 far outside this store's interval
    assert late["magnitude"] == "inconsistent" and not late["ci_low"] <= 10.08 <= late["ci_high"]
    assert rows["interventions.freeze_k.logit_std"]["magnitude"] is None  # the paper gives a sign only
    assert rows["interventions.val_loss"]["block"] == "magnitude" and rows["interventions.val_loss"]["magnitude"]



def test_local_checkpoint_series_leave_the_public_series_claims_not_measured():
    tb = make_synthetic_store(n_seeds=2, epochs=5, preset="demo", interventions=False)
    public = _rows(tb, preset="demo")
    assert public["checkpoints.positive"]["verdict"] != NOT_MEASURED  # Hub repos: measured
    assert public["checkpoints.positive"]["test"] == "binomial"
    tb["checkpoints"] = tb["checkpoints"].assign(repo=None)  # a manifest `path`, like the demo's tiny series
    local = _rows(tb, preset="demo")
    for cid in ("checkpoints.positive", "checkpoints.link"):
        assert local[cid]["verdict"] == NOT_MEASURED and local[cid]["value"] is None
        assert "local checkpoints, not the paper's public series" in local[cid]["reason"]
    from analysis.checkpoints import sentence

    c = compute_all(tb).results["checkpoints"]
    assert not any(s.public for s in c.series.values())
    assert sentence(c).startswith("Probed: ") and "local files" in sentence(c)


def test_every_row_names_its_quantity_and_the_paper_states_the_same_one():
    from analysis.claims import KINDS

    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5), preset="paper")
    for r in rows.values():
        assert r["kind"].split(":")[0].split()[0] in KINDS, (r["id"], r["kind"])
    iv = rows["interventions.forced_k_contraction.attn_entropy"]
    assert iv["kind"].startswith("change") and iv["paper"].startswith("Δ < 0, sign only")
    assert "2.0809" in iv["paper"] and "not the Δ" in iv["paper"]
    fin = rows["alignment.final.qk_identical"]
    assert fin["kind"].startswith("change") and fin["paper"].startswith("-0.5470")


def test_the_legend_the_sanity_block_and_the_summary(null_rows):
    assert [sc.units(1, "seeds"), sc.units(2, "seeds"), sc.units(1, "series"), sc.units(3, "series")] == [
        "1 seed", "2 seeds", "1 series", "3 series"]
    rows = list(null_rows.values())
    assert all(r["magnitude"] is None for r in rows)  # below paper scale: no magnitude column
    md = sc.render_markdown(rows, paper_scale=False)
    table = next(i for i, line in enumerate(md) if line.startswith("| claim"))
    sanity = next(i for i, line in enumerate(md) if line.startswith("Sanity checks"))
    assert md.index(sc.LEGEND) < table < sanity
    assert "family-wise" in sc.LEGEND and "direction only" in sc.LEGEND and "magnitude" in sc.LEGEND
    summary = md[-1]
    assert summary.startswith(f"Summary: {REPRODUCED} 0, {UNDECIDED} 25,") and "family of 25 tested claims" in summary
    assert "sanity checks 3 of 3 hold" in summary and FAILS not in summary.split(";")[0]
    text = sc.render_text(rows)
    assert text[0].split() == ["claim", "paper", "here", "[adjusted", "interval]", "n", "verdict"]
    assert text[-1].rstrip().endswith(HOLDS) and text[1].rstrip().endswith(UNDECIDED)


def _zero_spread(tb: dict, cond: str, metric: str, delta: float) -> dict:
    """The store with ``cond``'s ``metric`` set to its matched none run's + ``delta`` everywhere."""
    lay = tb["layers"].copy()
    iv = lay["sweep"] == "interventions"
    none = lay[iv & (lay["condition"] == "none")].set_index(["seed", "epoch", "layer"])[metric]
    at = iv & (lay["condition"] == cond)
    keys = list(zip(lay.loc[at, "seed"], lay.loc[at, "epoch"], lay.loc[at, "layer"], strict=True))
    lay.loc[at, metric] = none.loc[keys].to_numpy() + delta
    return {**tb, "layers": lay}


def test_what_cannot_be_decided_leaves_the_family_and_says_why() -> None:
    """A Δ of exactly 0.1 in each of 4 seeds (the sign-flip floor 0.125) and Appendix A over 6 public
    series (the binomial's smallest p 0.031) can never reach their level: "cannot be decided", out of
    Holm's multiplier, which the other claims then share among fewer (Tarone)."""
    tb = make_effect_store({"interventions.freeze_k.qk_erank": 3.0}, seeds=(11, 12, 13, 14), epochs=8,
                           iv_epochs=3, n_series=6, rng_seed=6)
    rows = _rows(_zero_spread(tb, "freeze_k", "logit_std", -0.1))
    zero = rows["interventions.freeze_k.logit_std"]
    assert zero["verdict"] == CANNOT and zero["p"] == 0.125 and zero["p_adj"] is None
    assert "cannot be decided with 4 seeds" in zero["reason"] and "2·2⁻ⁿ = 0.125" in zero["reason"]
    assert zero["seeds_needed"] is not None and 2 * 2.0 ** -zero["seeds_needed"] <= zero["level"]
    ck = rows["checkpoints.positive"]
    assert ck["verdict"] == CANNOT and "6 series" in ck["reason"] and "0.0312" in ck["reason"]
    tested = [r for r in rows.values() if r["block"] == "counted" and r["p_adj"] is not None]
    strong = rows["interventions.freeze_k.qk_erank"]
    assert strong["verdict"] == REPRODUCED and strong["level"] == pytest.approx(0.05 / len(tested))


def test_every_adjusted_interval_agrees_with_its_verdict() -> None:
    """Stores with effects of every size: a decided row's adjusted interval excludes the null, an
    undecided row's contains it, and the console shows that interval."""
    effects = {"interventions.freeze_k.qk_erank": 0.4, "interventions.freeze_k.logit_std": -0.12,
               "interventions.freeze_k.attn_entropy": 0.05, "alignment.contrast": 0.03,
               "slopes.pr_q_minus_pr_k": 0.05, "bridge.key_spec__qk_compression": 0.8,
               "categories.late_mid.pr_q": 0.3, "alignment.gap.L2": 0.04}
    seen = set()
    for k in range(3):
        rows = _rows(make_effect_store(effects, epochs=8, iv_epochs=3, rng_seed=20 + k))
        for r in rows.values():
            if r["block"] != "counted" or r["verdict"] in (NOT_MEASURED, CANNOT):
                continue
            lo = -math.inf if r["ci_adj_low"] is None else r["ci_adj_low"]
            hi = math.inf if r["ci_adj_high"] is None else r["ci_adj_high"]
            null = float(r["expected"].split()[-1])
            excludes = not lo <= null <= hi
            assert excludes == (r["verdict"] in (REPRODUCED, REVERSED)), (r["id"], lo, hi, r["verdict"], r["p_adj"])
            assert lo <= r["ci_low"] and r["ci_high"] <= hi  # wider than the unadjusted 95 %
            seen.add(r["verdict"])
    assert seen == {REPRODUCED, UNDECIDED}


def test_a_decision_shows_its_check_and_an_undecided_claim_the_seeds_it_needs(null_rows) -> None:
    rows = _rows(make_effect_store({"interventions.freeze_k.qk_erank": 3.0}, epochs=8, iv_epochs=3, rng_seed=7))
    decided = rows["interventions.freeze_k.qk_erank"]
    assert decided["verdict"] == REPRODUCED and decided["check"] == "rests on normality"
    assert decided["check_signflip_p"] == pytest.approx(2 * 2.0 ** -6)  # the floor at 6 seeds > its level
    for r in null_rows.values():
        if r["verdict"] == UNDECIDED:
            assert (r["seeds_needed"] is None) == (r["seeds_needed_reason"].startswith("seeds needed: —")), r["id"]


def test_lost_runs_are_shown_per_arm_with_the_worst_case() -> None:
    """A freeze_k run that diverged, and a baseline cell absent for one seed: each arm's count, and for
    a decided claim the p with the lost seed at the least favourable observed value."""
    tb = make_effect_store({"interventions.freeze_k.qk_erank": 3.0}, epochs=8, iv_epochs=3, rng_seed=8)
    ep = tb["epochs"].copy()
    lost = ep["run_id"].str.endswith(".freeze_k") & (ep["seed"] == 12) & (ep["sweep"] == "interventions")
    ep.loc[lost & (ep["epoch"] == ep.loc[lost, "epoch"].max()), "status"] = "diverged"
    lay = tb["layers"]

    def gone(df):
        return (df["sweep"] == "baseline") & (df["init"] == "qk_identical") & (df["depth"] == 2) & (df["seed"] == 13)

    rows = _rows({**tb, "epochs": ep[~gone(ep)], "layers": lay[~gone(lay)]})
    iv = rows["interventions.freeze_k.qk_erank"]
    assert iv["lost"] == {"freeze_k": 1, "matched none": 0} and iv["n"] == 5
    assert iv["worst_case_p"] is not None and iv["worst_case_holds"] in (True, False)
    assert rows["alignment.gap.L2"]["lost"]["qk_identical"] == 1
    assert rows["alignment.gap.L1"]["lost"]["qk_identical"] == 0
    assert rows["interventions.freeze_q.attn_entropy"]["lost"] == {"freeze_q": 0, "matched none": 0}


def test_the_console_scorecard_reads_at_a_glance(null_rows) -> None:
    """A table (claim · paper · here [adjusted interval] · n · verdict); no line over 160 characters;
    the definitions stay in report.md."""
    rows = list(null_rows.values())
    note = "demo preset: " + "a preset note long enough to need wrapping " * 8
    lines = sc.console(rows, "demo", [note])
    assert max(map(len, lines)) <= sc.WIDTH and lines[0] == "reproduction scorecard, preset demo:"
    assert lines[1].strip().startswith(REPRODUCED) and sum(ln.startswith("  note: ") for ln in lines) == 4
    assert not any("[change:" in ln or "[difference:" in ln for ln in lines)
    assert sum(ln.lstrip().startswith("↳ ≈") for ln in lines) >= 10  # seeds needed under undecided rows


def test_a_magnitude_row_tests_nothing() -> None:
    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5), preset="paper")
    assert rows["interventions.val_loss"]["block"] == "magnitude" and rows["interventions.val_loss"]["p"] is None


def test_two_sided_claims_name_the_direction_found_in_a_family_of_their_own(null_store, null_rows, monkeypatch) -> None:
    """A claim with no predicted direction (``≠``) reads "direction found: positive/negative" when its
    two-sided t test decides it, in its own family: the scorecard's claims keep their adjusted p, and
    the row gets the adjusted interval, the sign-flip check or the seeds it would need like any other."""
    from analysis import compute
    from analysis.claims import Claim, Expect
    from analysis.inference import FOUND_NEGATIVE, FOUND_POSITIVE, holm_tarone
    from analysis.section import Computed, Section

    rng = np.random.default_rng(5)
    ys = {"up": 1.0 + 0.1 * rng.standard_normal(8), "down": -1.0 + 0.1 * rng.standard_normal(8),
          "flat": rng.standard_normal(8)}

    class TwoSided(Section):
        name, heading, reads = "two_sided_toy", "Toy", ("checkpoints",)

        def compute(self, data):
            return Computed(None, {})

        def claims(self, an, paper_scale):
            return [Claim(f"toy.{k}", "two_sided_toy", f"{k}: which direction", "—", Expect("≠", 0), y,
                          ids=tuple(range(8)), family="toy seeds", kind="level: toy") for k, y in ys.items()]

    monkeypatch.setattr(compute, "_added", [])
    compute.register_section(TwoSided())
    rows = _rows(null_store)
    assert rows["toy.up"]["verdict"] == FOUND_POSITIVE and rows["toy.down"]["verdict"] == FOUND_NEGATIVE
    assert rows["toy.flat"]["verdict"] == UNDECIDED and rows["toy.flat"]["seeds_needed_reason"]
    for k in ("up", "down"):
        r = rows[f"toy.{k}"]
        assert r["expected"] == "≠ 0" and r["block"] == "counted" and r["family"] == "toy seeds"
        assert r["check"] is not None and not (r["ci_adj_low"] <= 0 <= r["ci_adj_high"])
        assert "family: toy seeds, adjusted apart" in r["reason"]
    ps = [rows[f"toy.{k}"]["p"] for k in ys]
    assert [rows[f"toy.{k}"]["p_adj"] for k in ys] == pytest.approx(holm_tarone(ps, [0.0] * 3).p_adj)
    for cid, r in null_rows.items():  # the scorecard's own family is as it was without them
        assert (rows[cid]["p_adj"], rows[cid]["level"], rows[cid]["family"]) == (r["p_adj"], r["level"], "scorecard")
    text = sc.summary(list(rows.values()))
    assert text.startswith(sc.summary(list(null_rows.values()))), text
    assert text.endswith(f"; toy seeds, a family of its own: {FOUND_POSITIVE} 1, {FOUND_NEGATIVE} 1, {UNDECIDED} 1 "
                         "(family of 3 tested claims, Holm at 5%)"), text
