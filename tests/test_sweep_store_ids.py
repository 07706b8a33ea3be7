"""sweep/store/ids.py (SPEC §6): ``run_id`` against its closed form, the canonical ``strengths`` text."""

from __future__ import annotations

from sweep.store import schema
from sweep.store.ids import run_id, strengths_json


def test_run_id_closed_form_and_distinct_cells() -> None:
    assert run_id("baseline", "demo", "qk_identical", 3, 41, "none") == "baseline.demo.qk_identical.L3.s41.none"
    cells = [(s, p, i, d, seed, iv) for s in ("baseline", "interventions") for p in ("demo", "paper")
             for i in ("a", "b") for d in (1, 12) for seed in (1, 11) for iv in ("none", "freeze_k")]
    ids = [run_id(*c) for c in cells]
    assert len(set(ids)) == len(cells)
    assert all("/" not in i and " " not in i for i in ids)


def test_run_id_at_default_strengths_is_unchanged_and_swept_strengths_are_appended() -> None:
    known = "interventions.demo.independent_xavier.L2.s7.forced_k_contraction"  # ids of stores written so far
    assert run_id("interventions", "demo", "independent_xavier", 2, 7, "forced_k_contraction") == known
    assert run_id("interventions", "demo", "independent_xavier", 2, 7, "forced_k_contraction", {}) == known
    swept = [run_id("interventions", "demo", "independent_xavier", 2, 7, "forced_k_contraction", {"lam": v})
             for v in (0, 0.0, 0.02, 0.2, 1e-05, 3)]
    assert swept == [known + s for s in (".lam0", ".lam0", ".lam0.02", ".lam0.2", ".lam1e-05", ".lam3")]
    assert run_id("b", "p", "i", 1, 1, "c", {"b": 1, "a": 0.5}) == "b.p.i.L1.s1.c.a0.5_b1"  # fields sorted


def test_strengths_json_is_canonical() -> None:
    assert strengths_json({}) == "{}"
    assert strengths_json({"lam": 0}) == strengths_json({"lam": 0.0}) == '{"lam": 0.0}'
    assert strengths_json({"b": 1, "a": 2}) == '{"a": 2.0, "b": 1.0}'


def test_schema_re_exports_the_same_functions() -> None:
    assert (schema.run_id, schema.strengths_json) == (run_id, strengths_json)
