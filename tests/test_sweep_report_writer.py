"""sweep/report/writer.py: ``build_report`` on tables in memory; presets kept apart."""

from __future__ import annotations

from sweep import report
from sweep.synthetic import make_synthetic_store


def test_build_report_without_figures(tmp_path):
    # its time (<= 5 s on the paper grid) is a target of bench/reducer_scaling.py, not a test
    tb = make_synthetic_store()
    s = report.build_report(tb, tmp_path, figures=False)
    assert s["outputs"]["figures"] == []
    assert "figures.fig1_alignment" not in s["missing"]  # not drawn is not missing


def test_a_registered_preset_fixes_the_post_collapse_window_before_the_data(tmp_path):
    """The demo preset's e_c was chosen on its schedule seeds' runs: the report uses it, says so and
    tests the post-collapse column; a preset without one (paper) gets a descriptive window, untested."""
    from sweep.presets import BASELINE_PRESETS
    from sweep.report.writer import preset_window

    demo = preset_window("demo")
    assert demo.start == BASELINE_PRESETS["demo"].collapse_end == 2 and "schedule seeds 37, 42" in demo.source
    assert preset_window("paper") is None and preset_window(None) is None
    s = report.build_report(make_synthetic_store(preset="demo", n_seeds=3, epochs=9, iv_epochs=5), tmp_path,
                            figures=False)
    assert s["slopes_post_collapse"]["collapse_end"] == 2 and s["slopes_post_collapse"]["fixed_before_the_data"]
    rows = {r["id"]: r for r in s["scorecard"]}
    assert rows["slopes.pr_k"]["post_p"] is not None


def test_the_scorecard_figure_heads_the_report(tmp_path):
    """One row per counted claim that was measured, the sanity checks and the rest apart; the report's
    scorecard section shows it first."""
    s = report.build_report(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5), tmp_path)
    assert "scorecard" in s["outputs"]["figures"]
    assert (tmp_path / "figures" / "scorecard.png").stat().st_size > 10_000
    assert (tmp_path / "figures" / "scorecard.pdf").is_file()
    md = (tmp_path / "report.md").read_text()
    assert md.index("(figures/scorecard.png)") < md.index("| claim | quantity |")
    from sweep.report.figures import forest_rows

    counted, apart = forest_rows(s["scorecard"])
    assert [r["id"] for r in counted] == [r["id"] for r in s["scorecard"]
                                          if r["block"] == "counted" and r["verdict"] != "not measured"]
    assert {r["block"] for r in apart} <= {"sanity", "counted"} and all(
        r["block"] == "sanity" or r["verdict"] == "not measured" for r in apart)
    assert len(counted) + len(apart) == sum(r["block"] != "magnitude" for r in s["scorecard"])
