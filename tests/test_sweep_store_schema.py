"""sweep/store/schema.py: the documented columns (SPEC §6), written out here by hand, against the
schemas and against the rows the probe really produces; ``run_id`` against its closed form."""

from __future__ import annotations

from helpers import random_tokens, tiny_model

from metrics.probe import probe_layers
from sweep.store.schema import (
    KEYS,
    LAYER_GRAD_METRICS,
    LAYER_HEAD_METRICS,
    LAYER_METRICS,
    SCHEMAS,
    run_id,
    strengths_json,
)

IDENTITY = ["sweep", "run_id", "preset", "init", "depth", "seed", "condition"]
#: SPEC §4.1's per-layer columns, in the probe's order (a hand copy, not an import).
SPEC_LAYER_METRICS = ["pr_q", "pr_k", "pr_q_minus_pr_k", "qk_erank", "attn_entropy", "attn_top1",
                      "attn_erank", "logit_std", "wq_erank", "wk_erank", "wq_erank_head",
                      "wk_erank_head", "qk_alignment", "wq_norm", "wk_norm"]


def test_layer_and_epoch_schemas_have_the_documented_columns_in_order() -> None:
    assert SCHEMAS["layers"].names == [*IDENTITY, "epoch", "layer", *SPEC_LAYER_METRICS,
                                       "grad_norm_q", "grad_norm_k", "schema_version", "qk_alignment_head",
                                       "strengths"]
    assert SCHEMAS["epochs"].names == [*IDENTITY, "epoch", "train_loss", "val_loss", "grad_norm", "wall_s",
                                       "tokens_per_s", "tokens_seen", "status", "schema_version", "strengths",
                                       "time", "skipped_steps"]
    for table in ("layers", "epochs"):  # a run's key column is never null (a checkpoint's layer is,
        for k in KEYS[table]:          # on the one row of a failed revision)
            assert not SCHEMAS[table].field(k).nullable, (table, k)


def test_probe_rows_fill_exactly_the_schema_metric_columns() -> None:
    model = tiny_model(seed=1)
    rows = probe_layers(model, random_tokens(2, 16, model.cfg.vocab_size, seed=1))
    assert [r["layer"] for r in rows] == list(range(model.cfg.n_layer))
    written = set(SCHEMAS["layers"].names) - set(IDENTITY) - {"epoch", "schema_version", "strengths",  # the cell's
                                                               *LAYER_GRAD_METRICS}
    for row in rows:
        assert set(row) == written  # no column the probe makes is dropped, none of the schema's is left empty
        assert [k for k in row if k in LAYER_METRICS] == SPEC_LAYER_METRICS  # the documented order
        (head,) = LAYER_HEAD_METRICS
        assert len(row[head]) == model.cfg.n_head


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
