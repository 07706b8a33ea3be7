"""sweep/report/inputs.py: ``load_tables`` reads a store's tables with the schema's columns."""

from __future__ import annotations

import pandas as pd

from sweep import report
from sweep.store.schema import SCHEMAS
from sweep.synthetic import make_synthetic_store, write_store


def test_load_tables_reads_the_store(tmp_path):
    tb = make_synthetic_store(n_seeds=1, depths=(4,), epochs=2, iv_epochs=2)
    write_store(tb, tmp_path)
    got = report.load_tables(tmp_path)
    for t in ("layers", "epochs", "checkpoints"):
        assert list(got[t].columns) == SCHEMAS[t].names
        assert len(got[t]) == len(tb[t])
    key = ["run_id", "epoch", "layer"]
    a = got["layers"].sort_values(key).reset_index(drop=True)
    b = tb["layers"].sort_values(key).reset_index(drop=True)
    pd.testing.assert_series_equal(a["pr_k"], b["pr_k"])
    empty = report.load_tables(tmp_path / "nowhere")
    assert all(df.empty and list(df.columns) == SCHEMAS[t].names for t, df in empty.items())
