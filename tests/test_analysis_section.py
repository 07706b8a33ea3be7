"""analysis/section.py and the registry in analysis/compute.py: a statistic is one module.

The toy section below is everything a new statistic needs: registered, it reaches
stats.json (NaN as null), report.md (heading, sentence, table, figure), tables/,
figures/, the scorecard and the skipped-file marking, with no other file edited.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import compute
from analysis.claims import Claim, Expect, per_unit
from analysis.frames import baseline, final_rows
from analysis.primitives import Summary
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section
from analysis.units import column
from sweep import report
from sweep.report.inputs import skipped_file
from sweep.synthetic import make_synthetic_store


@dataclass
class ToyResult(Result):
    key = "toy"
    n_runs: int
    final_pr_q: Summary
    undefined: float  # NaN: must reach stats.json as null


class Toy(Section[ToyResult]):
    name = "toy"
    heading = "Toy statistic"
    reads = ("baseline",)
    table_names = ("toy_table",)
    figures = (Figure("toy_figure", "Toy figure", f"{__name__}:draw_toy"),)

    def compute(self, data: Inputs) -> Computed[ToyResult]:
        fin = final_rows(baseline(data.layers))
        if fin.empty:
            return Computed(None, {"toy": "no baseline runs"})
        return Computed(ToyResult(int(fin["run_id"].nunique()), Summary.of(fin["pr_q"]), math.nan),
                        frames={"toy_final": fin})

    def tables(self, result: ToyResult) -> dict[str, pd.DataFrame | None]:
        return {"toy_table": pd.DataFrame([{"n_runs": result.n_runs, "pr_q": result.final_pr_q.mean}])}

    def prose(self, result: ToyResult) -> list[str]:
        return [f"The toy counted {result.n_runs} baseline runs."]

    def claims(self, an: Analysis, paper_scale: bool) -> list[Claim]:
        claim = ("toy.pr_q", "toy", "toy: final pr_q positive", "—", Expect(">", 0))
        if an.results["toy"] is None:
            return [Claim(*claim, reason=an.missing["toy"])]
        x = an.frames["toy_final"].groupby("seed")["pr_q"].mean().to_numpy()[:, None]  # [seeds, 1]
        return [Claim(*claim, per_unit(x, column(0)), an.results["toy"].n_runs)]


def draw_toy(an: Analysis, out: Path) -> list[Path]:
    if an.results["toy"] is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    (out / "toy_figure.png").write_bytes(b"png")
    return [out / "toy_figure.png"]


@pytest.fixture
def toy(monkeypatch):
    """The toy section registered after the bridge, for one test only."""
    monkeypatch.setattr(compute, "_added", [])
    return compute.register_section(Toy(), after="bridge")


def test_toy_section_reaches_every_output(toy, tmp_path):
    tb = make_synthetic_store(n_seeds=2, epochs=4, iv_epochs=3, checkpoints=False)
    report.build_report(tb, tmp_path)
    s = json.loads((tmp_path / "stats.json").read_text())
    assert s["toy"]["n_runs"] == 18 and s["toy"]["final_pr_q"]["n"] == 18 * 6
    assert s["toy"]["undefined"] is None  # NaN -> null, in the one shared conversion
    assert list(s).index("toy") == list(s).index("bridge_post_collapse") + 1  # the bridge's last key
    md = (tmp_path / "report.md").read_text()
    heads = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert heads.index("## Toy statistic") == heads.index("## Mechanism bridge (Figure 3)") + 1
    assert "The toy counted 18 baseline runs." in md
    assert "(`tables/toy_table.csv`, `.md`, `.tex`)" in md and "](figures/toy_figure.png)" in md
    assert pd.read_csv(tmp_path / "tables" / "toy_table.csv")["n_runs"].tolist() == [18]
    assert (tmp_path / "tables" / "toy_table.tex").exists() and (tmp_path / "figures" / "toy_figure.png").exists()
    row = next(r for r in s["scorecard"] if r["id"] == "toy.pr_q")
    assert row["section"] == "toy" and row["verdict"] == "direction reproduced"
    assert "toy" in skipped_file("/s", "/s/layers/baseline.paper.qk_identical.L4.s0.none/e.parquet", "x")["sections"]
    assert "toy" not in skipped_file("/s", "/s/checkpoints/x/e.parquet", "x")["sections"]


def test_toy_section_without_data_is_null_and_listed(toy, tmp_path):
    report.build_report(make_synthetic_store(baseline=False, checkpoints=False, iv_epochs=3), tmp_path)
    s = json.loads((tmp_path / "stats.json").read_text())
    assert s["toy"] is None and s["missing"]["toy"] == "no baseline runs"
    assert s["missing"]["tables.toy_table"] == "no baseline runs"
    assert s["missing"]["figures.toy_figure"] == "no baseline runs"
    assert "## Toy statistic\n\n*No data: no baseline runs.*" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "tables" / "toy_table.csv").exists()
    row = next(r for r in s["scorecard"] if r["id"] == "toy.pr_q")
    assert row["verdict"] == "not measured" and row["reason"] == "no baseline runs"


def test_registry_order_and_errors(monkeypatch):
    monkeypatch.setattr(compute, "_added", [])
    assert [s.name for s in compute.sections()] == list(compute.SECTIONS)
    compute.register_section(Toy())
    assert compute.sections()[-1].name == "toy"
    compute.register_section(Toy(), after="alignment")  # again: replaces, and moves
    assert [s.name for s in compute.sections()].count("toy") == 1 and compute.sections()[1].name == "toy"
    with pytest.raises(ValueError, match="built in"):
        compute.register_section(compute.BUILTIN_SECTIONS[0])

    class Clobber(Toy):
        name = "missing"

    class SameTable(Toy):
        name = "toy2"

    with pytest.raises(ValueError, match="built in"):
        compute.register_section(Clobber())
    with pytest.raises(ValueError, match="already used: toy_figure, toy_table"):
        compute.register_section(SameTable())
    compute.register_section(Toy(), after="no_such_section")
    with pytest.raises(ValueError, match="no section 'no_such_section'"):
        compute.sections()


def test_result_json_is_strict():
    r = ToyResult(3, Summary(np.float64(0.5), None, 3), math.inf)
    assert r.to_json() == {"toy": {"n_runs": 3, "final_pr_q": {"mean": 0.5, "sd": None, "n": 3}, "undefined": None}}
