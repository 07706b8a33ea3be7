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
