"""sweep/report/tables.py: a table built from a hand-written stats dict, and its CSV / Markdown /
LaTeX files (full precision, four significant digits, ``--`` for missing, LaTeX escaping)."""

from __future__ import annotations

import pandas as pd

from sweep.report import tables


def test_table4_slopes_has_one_row_per_group_and_metric() -> None:
    stats = {"slopes": {
        "uncoupled": {"pr_k_slope": {"mean": -0.5, "sd": 0.1, "n": 4, "positive": 0, "negative": 4}},
        "coupled": {"pr_k_slope": {"mean": 0.25, "sd": 0.05, "n": 2, "positive": 2, "negative": 0},
                    "pr_q_slope": {"mean": 0.0, "sd": 0.0, "n": 2, "positive": 0, "negative": 0}}}}
    df = tables.table4_slopes(stats)
    expected = pd.DataFrame([
        {"group": "uncoupled", "metric": "pr_k_slope", "mean": -0.5, "sd": 0.1, "n": 4, "positive": 0, "negative": 4},
        {"group": "coupled", "metric": "pr_k_slope", "mean": 0.25, "sd": 0.05, "n": 2, "positive": 2, "negative": 0},
        {"group": "coupled", "metric": "pr_q_slope", "mean": 0.0, "sd": 0.0, "n": 2, "positive": 0, "negative": 0}])
    pd.testing.assert_frame_equal(df, expected)
    none_fitted = {"slopes": {"pooled": {"pr_k_slope": {"mean": None, "sd": None, "n": 0, "positive": 0, "negative": 0}}}}
    assert tables.table4_slopes(none_fitted) is None and tables.table4_slopes({}) is None


def test_write_table_keeps_csv_exact_and_formats_md_and_tex(tmp_path) -> None:
    df = pd.DataFrame({"init_name": ["a_b", "c"], "pr_k": [1 / 3, None], "ok": [True, False], "n": [3, 12]})
    csv, md, tex = tables.write_table(df, tmp_path / "t", "demo")
    assert [p.name for p in (csv, md, tex)] == ["demo.csv", "demo.md", "demo.tex"]
    back = pd.read_csv(csv)
    assert back["pr_k"].iloc[0] == 1 / 3 and pd.isna(back["pr_k"].iloc[1])  # full precision, empty cell
    lines = md.read_text().splitlines()
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["a_b", "0.3333", "yes", "3"]
    assert [c.strip() for c in lines[3].strip("|").split("|")] == ["c", "--", "no", "12"]
    latex = tex.read_text()
    assert all(rule in latex for rule in ("\\toprule", "\\midrule", "\\bottomrule"))
    assert "init\\_name" in latex and "a\\_b" in latex and "0.3333" in latex
