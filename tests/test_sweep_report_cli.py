"""sweep/report/cli.py: ``python -m sweep.report`` end to end on synthetic stores (stats.json, report.md, tables, figures), and on partial stores."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.compute import SECTIONS, compute_all
from sweep import report
from sweep.report import tables
from sweep.synthetic import (
    make_synthetic_store,
    write_store,
)

ALL_TABLES = (
    "table3_alignment",
    "table4_slopes",
    "table5_interventions",
    "layer_categories",
    "bridge",
    "appendixA_checkpoints",
)
SEP = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def _strict_json(path: Path) -> dict:
    def bad(c):
        raise ValueError(f"non-JSON constant {c}")

    return json.loads(path.read_text(), parse_constant=bad)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A small but complete store written as Parquet and reduced through the CLI (run here, so
    every test of the module sees the report whatever the order): (root, out, tables, status, stdout)."""
    root = tmp_path_factory.mktemp("store")
    out = tmp_path_factory.mktemp("report")
    tb = make_synthetic_store(n_seeds=2, epochs=8, iv_epochs=4)
    write_store(tb, root)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = report.main(["--store", str(root), "--out", str(out)])
    return root, out, tb, status, printed.getvalue()


def test_cli_end_to_end(full_run):
    root, out, tb, status, stdout = full_run
    assert status == 0
    printed = stdout.splitlines()
    assert printed[0].endswith("report.md") and Path(printed[0]) == out / "report.md"
    blank = printed.index("")
    assert 3 <= blank - 1 <= 5  # headline lines, then the scorecard
    s = _strict_json(out / "stats.json")
    assert printed[blank + 1].startswith("reproduction scorecard, preset paper")
    head = next(i for i, line in enumerate(printed) if line.split()[:2] == ["claim", "paper"])
    claims = [line for line in printed[head + 1:] if not line.startswith("    ")]  # ↳ notes are indented
    assert len(claims) == len(s["scorecard"])  # one line per claim
    assert claims[0].rstrip().endswith(("undecided", "reproduced", "reversed", "measured", "cannot be decided"))
    assert max(map(len, printed[blank:])) <= 160
    assert s["missing"] == {}  # the dose–response section is optional: no strength sweep, no entry
    assert s["provenance"]["sweeps"]["baseline"]["n_runs"] == 18
    assert s["provenance"]["sweeps"]["interventions"]["n_runs"] == 30
    assert s["provenance"]["sweeps"]["baseline"]["final_epoch"] == {"min": 8, "max": 8}
    assert s["provenance"]["paper_scale"] is True
    # the Parquet round trip gives the same numbers as the in-memory tables
    direct = report.build_report(tb, out / "direct", figures=False)
    assert s["alignment"]["welch_p"] == pytest.approx(direct["alignment"]["welch_p"])
    for sec in SECTIONS:
        _assert_close(s[sec], direct[sec], sec)


def _assert_close(a, b, where: str) -> None:
    """Recursive equality with a float tolerance (Parquet reads may reorder rows)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def test_figures_are_written(full_run):
    _, out, *_ = full_run
    for name in ("fig1_alignment", "fig2_pr", "fig3_bridge", "figA_checkpoints"):
        png = out / "figures" / f"{name}.png"
        pdf = out / "figures" / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 2_000, name
        assert f"](figures/{name}.png)" in (out / "report.md").read_text()


def test_tables_round_trip_and_parse(full_run):
    _, out, tb, *_ = full_run
    built = tables.build_tables(compute_all(tb))
    for name in ALL_TABLES + ("table3_contrast", "table5_deltas", "reference_comparison"):
        csv = out / "tables" / f"{name}.csv"
        back = pd.read_csv(csv)
        ref = built[name]
        assert list(back.columns) == list(ref.columns), name
        assert len(back) == len(ref), name
        for col in ref.columns:
            if pd.api.types.is_float_dtype(ref[col]):
                pd.testing.assert_series_equal(
                    back[col].astype(float), ref[col].astype(float), check_names=False, rtol=1e-12
                )
        md = (out / "tables" / f"{name}.md").read_text().strip().splitlines()
        assert md[0].startswith("|") and SEP.match(md[1]), name
        assert len(md) == len(ref) + 2
        assert md[0].count("|") == len(ref.columns) + 1
        tex = (out / "tables" / f"{name}.tex").read_text()
        for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
            assert rule in tex, (name, rule)
        assert "\\begin{tabular}" in tex and "_" not in tex.replace("\\_", ""), name


def test_table_values_match_stats(full_run):
    _, out, *_ = full_run
    s = _strict_json(out / "stats.json")
    t4 = pd.read_csv(out / "tables" / "table4_slopes.csv").set_index(["group", "metric"])
    assert t4.loc[("pooled", "pr_k"), "negative"] == s["slopes"]["pooled"]["pr_k"]["negative"]
    t5 = pd.read_csv(out / "tables" / "table5_interventions.csv").set_index("condition")
    assert t5.loc["freeze_k", "confidence"] == pytest.approx(
        s["interventions"]["freeze_k"]["confidence"]
    )
    assert pd.isna(t5.loc["qk_align_reg", "confidence"])


def test_report_md_sentences_carry_numbers(full_run):
    _, out, *_ = full_run
    s = _strict_json(out / "stats.json")
    md = (out / "report.md").read_text()
    d = s["slopes"]["pooled"]["pr_q_minus_pr_k"]
    assert f"pr_q − pr_k rises in {d['positive']} of {d['n']} seed-averaged traces" in md
    assert f"Hedges' g = {s['alignment']['hedges_g']:.2f}" in md
    assert "beside ours" in md  # paper preset: comparison with the paper
    ref = pd.read_csv(out / "tables" / "reference_comparison.csv")
    assert list(ref.columns) == ["quantity", "paper", "ours"]
    assert "## Missing" in md and "Nothing: every section had data." in md
    assert "Dose–response" not in md  # optional section, left out: this store has no strength sweep


def _run_cli(tmp_path: Path, tb: dict | None, figures: bool = False) -> tuple[dict, str]:
    root, out = tmp_path / "store", tmp_path / "out"
    if tb is not None:
        write_store(tb, root)
    root.mkdir(exist_ok=True)  # an empty store is a folder; a missing one is an error
    args = ["--store", str(root), "--out", str(out)] + ([] if figures else ["--no-figures"])
    assert report.main(args) == 0
    return _strict_json(out / "stats.json"), (out / "report.md").read_text()


def test_only_baseline(tmp_path):
    s, md = _run_cli(
        tmp_path, make_synthetic_store(n_seeds=2, epochs=4, interventions=False, checkpoints=False)
    )
    assert {"interventions", "checkpoints"} <= set(s["missing"])
    assert "alignment" not in s["missing"] and "slopes" not in s["missing"]
    assert s["interventions"] is None and s["alignment"]["welch_p"] is not None
    assert not (tmp_path / "out" / "tables" / "table5_interventions.csv").exists()
    assert (tmp_path / "out" / "tables" / "table4_slopes.csv").exists()
    assert "tables.table5_interventions" in s["missing"]
    assert "`interventions`: no intervention runs" in md


def test_only_interventions(tmp_path):
    s, md = _run_cli(tmp_path, make_synthetic_store(baseline=False, checkpoints=False, iv_epochs=3))
    for sec in ("alignment", "slopes", "layer_categories", "bridge", "checkpoints"):
        assert sec in s["missing"], sec
    assert "interventions" not in s["missing"]
    assert s["interventions"]["forced_k_contraction"]["confidence"] is not None
    assert (tmp_path / "out" / "tables" / "table5_interventions.md").exists()
    assert not (tmp_path / "out" / "tables" / "table3_alignment.csv").exists()


def test_one_init_one_seed(tmp_path):
    tb = make_synthetic_store(
        n_seeds=1,
        epochs=4,
        inits=("independent_xavier",),
        iv_seeds=(7,),
        iv_epochs=3,
        checkpoints=False,
    )
    s, md = _run_cli(tmp_path, tb)
    assert "alignment.welch" in s["missing"] and "alignment.gap_by_depth" in s["missing"]
    assert "qk_identical, disjoint_support_xavier" in s["missing"]["baseline.inits"]
    assert "slopes.coupled" in s["missing"] and "slopes.uncoupled" not in s["missing"]
    assert s["alignment"]["welch_p"] is None and s["alignment"]["hedges_g"] is None
    assert s["alignment"]["final"]["independent_xavier"]["sd"] is not None  # 3 depths -> 3 runs
    assert s["interventions"]["freeze_k"]["attn_entropy"]["sd"] is None  # one seed
    assert s["interventions"]["freeze_k"]["confidence"] in (0.0, 1.0)
    # no test sentence without a test (the scorecard above only quotes the paper's p)
    assert "Welch" not in md.split("## Data provenance")[1].split("## Table 4")[0]


def test_empty_store(tmp_path):
    s, md = _run_cli(tmp_path, None, figures=True)
    for sec in SECTIONS:
        # optional: left out without a strength sweep, or without checkpoint rows in a set of seeds
        assert sec in s["missing"] or sec in ("dose_response", "checkpoint_sets"), sec
        assert s[sec] is None
    assert s["provenance"]["n_runs"] == 0
    assert "The store holds no baseline or intervention runs." in md
    assert "listed for orientation only" in md
    assert sorted(p.name for p in (tmp_path / "out" / "tables").iterdir()) == [
        "reference_comparison.csv",
        "reference_comparison.md",
        "reference_comparison.tex",
    ]
    assert not (tmp_path / "out" / "figures").exists() or not any(
        (tmp_path / "out" / "figures").iterdir()
    )


def test_demo_preset_notes_lr_and_skips_paper_columns(tmp_path):
    tb = make_synthetic_store(
        n_seeds=2, epochs=5, preset="demo", interventions=False, checkpoints=False
    )
    s, md = _run_cli(tmp_path, tb)
    assert s["provenance"]["paper_scale"] is False
    assert "lr 1e-3" in md
    assert "listed for orientation only" in md
    ref = pd.read_csv(tmp_path / "out" / "tables" / "reference_comparison.csv")
    assert "ours" not in ref.columns


def test_mixed_presets_and_preset_filter(tmp_path):
    a = make_synthetic_store(
        n_seeds=1, epochs=3, preset="demo", interventions=False, checkpoints=False
    )
    b = make_synthetic_store(
        n_seeds=1, epochs=3, preset="smoke", interventions=False, checkpoints=False
    )
    tb = {k: pd.concat([a[k], b[k]], ignore_index=True) for k in a}
    s = report.build_report(tb, tmp_path / "mixed", figures=False)
    assert s["presets"] == ["demo", "smoke"]  # never pooled: one report each
    assert {p: s["by_preset"][p]["provenance"]["sweeps"]["baseline"]["n_runs"] for p in s["presets"]} == {
        "demo": 9, "smoke": 9}
    s2 = report.build_report(tb, tmp_path / "one", figures=False, preset="smoke")
    assert s2["provenance"]["presets"] == ["smoke"]
    assert s2["provenance"]["sweeps"]["baseline"]["n_runs"] == 9



# ----------------------------------------------------------------------------
# presets are never pooled
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_presets(tmp_path_factory):
    a = make_synthetic_store(n_seeds=2, epochs=4, iv_epochs=3, iv_seeds=(7, 37), preset="demo",
                             checkpoints=False, rng_seed=1)
    b = make_synthetic_store(n_seeds=3, epochs=6, depths=(4, 8), iv_epochs=3, preset="paper",
                             checkpoints=False, rng_seed=2)
    tb = {k: pd.concat([a[k], b[k]], ignore_index=True) for k in a}
    root = tmp_path_factory.mktemp("store")
    write_store(tb, root)
    return root, tb


def test_default_report_keeps_presets_apart(two_presets, tmp_path, capsys):
    root, tb = two_presets
    out = tmp_path / "out"
    assert report.main(["--store", str(root), "--out", str(out), "--no-figures"]) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "stats.json").read_text())
    assert s["presets"] == ["demo", "paper"]
    runs = {p: tb["layers"].loc[tb["layers"]["preset"] == p] for p in s["presets"]}
    for p, lay in runs.items():
        one = s["by_preset"][p]
        base = lay[lay["sweep"] == "baseline"]
        per_init = base.groupby("init")["run_id"].nunique()
        for init, d in one["alignment"]["final"].items():
            assert d["n"] == per_init[init], (p, init)  # n counts this preset's runs only
        assert one["provenance"]["presets"] == [p]
        assert one["slopes"]["pooled"]["pr_k"]["n"] == base.groupby(["init", "depth", "layer"]).ngroups
        iv = lay[(lay["sweep"] == "interventions") & (lay["condition"] == "freeze_k")]
        assert one["interventions"]["freeze_k"]["n_seeds"] == iv["run_id"].nunique()
        card = [r for r in s["scorecard"] if r["preset"] == p]
        assert card and {r["n"] for r in card if r["section"] == "alignment" and r["n"]} == {
            base["seed"].nunique()}
        assert (out / "presets" / p / "stats.json").exists()
        assert f"reproduction scorecard, preset {p}" in printed
    md = (out / "report.md").read_text()
    assert md.index("## Reproduction scorecard — preset `demo`") < md.index("## Preset `demo`")
    assert "## Preset `paper`" in md and "presets/paper/tables/" in md
    assert "demo preset: lr 1e-3" in md  # the registry's note of the demo preset


def test_absent_preset_is_a_clear_error(two_presets, tmp_path, capsys):
    root, _ = two_presets
    with pytest.raises(SystemExit) as exit_:  # sweep.cli.CliExit: one line, exit status 2
        report.main(["--store", str(root), "--out", str(tmp_path / "o"), "--no-figures",
                     "--preset", "nosuch"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    assert len(err) == 1 and "nosuch" in err[0] and "demo, paper" in err[0]
    assert not (tmp_path / "o" / "stats.json").exists()


def test_one_preset_is_reported_alone(two_presets, tmp_path):
    root, tb = two_presets
    out = tmp_path / "o"
    assert report.main(["--store", str(root), "--out", str(out), "--no-figures", "--preset", "demo"]) == 0
    s = json.loads((out / "stats.json").read_text())
    assert s["presets"] == ["demo"] and {r["preset"] for r in s["scorecard"]} == {"demo"}
    assert s["provenance"]["sweeps"]["baseline"]["n_runs"] == 18  # 3 inits x 3 depths x 2 seeds


# ----------------------------------------------------------------------------
# nothing skipped silently
# ----------------------------------------------------------------------------


def test_truncated_file_is_listed_and_marks_its_sections(tmp_path, capsys):
    tb = make_synthetic_store(n_seeds=2, epochs=4, iv_epochs=3, checkpoints=False)
    root = tmp_path / "store"
    write_store(tb, root)
    victim = sorted((root / "layers").glob("baseline.*/epoch-0000.parquet"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="unreadable"):
        assert report.main(["--store", str(root), "--out", str(out), "--no-figures"]) == 0
    s = json.loads((out / "stats.json").read_text())
    assert [Path(f["path"]).resolve() for f in s["skipped_files"]] == [victim.resolve()]
    f = s["skipped_files"][0]
    assert f["table"] == "layers" and f["sweep"] == "baseline" and f["preset"] == "paper"
    md = (out / "report.md").read_text()
    assert "## Skipped store files" in md and str(victim.name) in md and victim.parent.name in md
    marked = {r["section"] for r in s["scorecard"] if r["skipped_files"]}
    assert marked == {"alignment", "slopes", "layer_categories", "bridge"}
    assert "unreadable store file(s) skipped" in capsys.readouterr().out


def test_every_table_link_of_a_multi_preset_index_exists(tmp_path):
    a = make_synthetic_store(n_seeds=1, epochs=3, iv_epochs=3, iv_seeds=(7,), preset="demo", rng_seed=1)
    b = make_synthetic_store(n_seeds=1, epochs=3, iv_epochs=3, iv_seeds=(7,), preset="smoke",
                             checkpoints=False, rng_seed=2)
    tb = {k: pd.concat([a[k], b[k]], ignore_index=True) for k in a}
    report.build_report(tb, tmp_path, figures=False)
    links = re.findall(r"\(`([^`]+\.csv)`, `\.md`, `\.tex`\)", (tmp_path / "report.md").read_text())
    assert "presets/demo/tables/appendixA_checkpoints.csv" in links  # was written without its prefix
    assert links and all((tmp_path / link).exists() for link in links), links
