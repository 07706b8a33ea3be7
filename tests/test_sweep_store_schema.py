"""sweep/store/schema.py: the documented columns (SPEC §6), written out here by hand, against the
schemas and against the rows the probe really produces (``run_id``: test_sweep_store_ids.py)."""

from __future__ import annotations

from helpers import random_tokens, tiny_model

from metrics.probe import probe_layers
from sweep.store.schema import (
    KEYS,
    LAYER_GRAD_METRICS,
    LAYER_HEAD_METRICS,
    LAYER_METRICS,
    SCHEMAS,
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
