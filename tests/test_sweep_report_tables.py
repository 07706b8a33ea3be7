"""sweep/report/tables.py: a table's CSV / Markdown / LaTeX files (full precision, four significant
digits, ``--`` for missing, LaTeX escaping)."""

from __future__ import annotations

import pandas as pd

from sweep.report import tables


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
