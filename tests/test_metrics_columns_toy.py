"""metrics/columns.py end to end: a toy per-layer metric is one ``LayerMetric`` entry plus its
function (here, below). Added to the vocabulary, it reaches the trainer's rows, the store and the
report (stats.json and the ``layer_metrics`` table) with the values recomputed here; a store file
written before it existed still reads, the toy column null. No Ray: rows are written as
``sweep.trial.trainable.write_rows`` writes them."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from helpers import tiny_corpus, tiny_model_cfg, tiny_train_cfg
from store_helpers import data_files

from metrics import columns
from metrics.columns import PER_HEAD, LayerMetric, check_layer_columns
from model.report import EpochReport
from model.stack import Member
from model.trainer import Trainer
from sweep.report import write_report
from sweep.store import Store
from sweep.store import schema as store_schema
from sweep.store.schema import run_id


def toy_qk_abs_ratio(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """mean |q| / mean |k| over the probe batch. q: [B, T, H·d_head]; k: [B, T, H_kv·d_head]."""
    return q.double().abs().mean() / k.double().abs().mean()


def toy_wq_head_norms(wq: torch.Tensor, n_head: int) -> torch.Tensor:
    """‖W_Q‖_F of each head's rows. wq: [H·d_head, D]. Returns [n_head]."""
    return wq.double().reshape(n_head, -1).norm(dim=-1)


TOY = LayerMetric("toy_qk_abs_ratio", "activation", ("q", "k"), f"{__name__}:toy_qk_abs_ratio",
                  "mean |q| over mean |k| (a toy)")
TOY_HEAD = LayerMetric("toy_wq_head_norm", "weight", ("wq", "n_head"), f"{__name__}:toy_wq_head_norms",
                       "Frobenius norm of each head's rows of W_Q (a toy)", PER_HEAD)
INIT, SEED, EPOCHS = "independent_xavier", 5, 2


@contextmanager
def toy_vocabulary(schema: bool = True):
    """The vocabulary with the two toys appended (and the ``layers`` schema built from it, as
    ``sweep.store.schema`` builds it at import); both restored afterwards."""
    extended = (*columns.LAYER_COLUMNS, TOY, TOY_HEAD)
    check_layer_columns(extended)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(columns, "LAYER_COLUMNS", extended)
        if schema:
            mp.setitem(store_schema.SCHEMAS, "layers", store_schema.layers_schema(extended))
        yield


def train() -> tuple[Trainer, list[EpochReport]]:
    cfg = tiny_train_cfg(epochs=EPOCHS, steps_per_epoch=2, seed=SEED)
    trainer = Trainer(tiny_model_cfg(), [Member(INIT, SEED, cfg)], tiny_corpus())
    reports: list[EpochReport] = []
    trainer.run(lambda _, r: reports.append(r))
    return trainer, reports


def ident(seed: int) -> dict:
    cell = {"sweep": "baseline", "preset": "tiny", "init": INIT, "depth": tiny_model_cfg().n_layer,
            "seed": seed, "condition": "none"}
    return {**cell, "run_id": run_id(*cell.values())}


def write_rows(store: Store, identity: dict, reports: list[EpochReport], drop: tuple[str, ...] = ()) -> None:
    """As ``sweep.trial.trainable.write_rows``, every epoch; ``drop``: columns left out (an older writer)."""
    for r in reports:
        store.write_layers([{**identity, "epoch": r.epoch, **{k: v for k, v in row.items() if k not in drop}}
                            for row in r.layers])
        store.write_epoch({**identity, "epoch": r.epoch, **r.run})


def recomputed(trainer: Trainer) -> list[tuple[float, list[float]]]:
    """Both toys per layer of the trained model, from its own probe pass, in NumPy float64."""
    model = trainer.model.eval()
    with torch.no_grad():
        _, _, traces = model.probe(trainer.probe_x)
    out = []
    for block, tr in zip(model.blocks, traces, strict=True):
        q, k = tr.q.double().numpy(), tr.k.double().numpy()  # [B, H, T, d_head]
        wq = block.attn.q_proj.weight.detach().double().numpy()
        heads = [float(np.sqrt((wq[h * block.attn.d_head:(h + 1) * block.attn.d_head] ** 2).sum()))
                 for h in range(block.attn.n_head)]
        out.append((float(np.abs(q).mean() / np.abs(k).mean()), heads))
    return out


def test_a_toy_metric_reaches_the_rows_the_store_and_the_report(tmp_path: Path) -> None:
    with toy_vocabulary():
        trainer, reports = train()
        want = recomputed(trainer)
        final = reports[-1]
        assert final.epoch == EPOCHS and final.run["status"] == "completed"
        for row, (ratio, heads) in zip(final.layers, want, strict=True):
            assert row[TOY.name] == pytest.approx(ratio, rel=1e-9)
            assert row[TOY_HEAD.name] == pytest.approx(heads, rel=1e-9)
            assert ratio != pytest.approx(1.0, abs=1e-3)  # q and k differ: the toy has teeth
        store = Store(str(tmp_path / "store"))
        write_rows(store, ident(SEED), reports)
        back = store.read("layers").sort_values(["epoch", "layer"])
        assert back[TOY.name].tolist() == [row[TOY.name] for r in reports for row in r.layers]
        for got, (ratio, heads) in zip(back[back["epoch"] == EPOCHS].itertuples(), want, strict=True):
            assert getattr(got, TOY.name) == pytest.approx(ratio, rel=1e-9)
            assert list(getattr(got, TOY_HEAD.name)) == pytest.approx(heads, rel=1e-9)

        write_report(str(tmp_path / "store"), str(tmp_path / "report"), figures=False)
    lm = json.loads((tmp_path / "report" / "stats.json").read_text())["layer_metrics"]
    assert lm["final_epoch"] == {"min": EPOCHS, "max": EPOCHS}
    toy = lm["by_init"][INIT][TOY.name]
    assert toy["n"] == 1 and toy["mean"] == pytest.approx(np.mean([r for r, _ in want]), rel=1e-9)
    depth = str(tiny_model_cfg().n_layer)
    for layer, (ratio, _) in enumerate(want):
        assert lm["by_layer"][INIT][depth][str(layer)][TOY.name] == pytest.approx(ratio, rel=1e-9)
    assert lm["by_head"][INIT][TOY_HEAD.name] == pytest.approx(np.mean([h for _, h in want], axis=0), rel=1e-9)
    table = pd.read_csv(tmp_path / "report" / "tables" / "layer_metrics.csv")
    assert table[TOY.name].tolist() == pytest.approx([r for r, _ in want], rel=1e-9)
    md = (tmp_path / "report" / "report.md").read_text()
    assert TOY.name in md.split("## Per-layer metrics")[1]


def test_the_checkpoint_probe_measures_the_toy_activation_metric() -> None:
    """probe_hf_model emits the activation side's float columns: the toy too (grouped-query K here),
    the weight-side per-head toy not."""
    import transformers as tf
    from hf_trace_helpers import trace_hf_model

    from metrics.hf_arch import tiny_config
    from metrics.hf_probe import probe_hf_model

    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(tiny_config("llama")).eval()
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    with toy_vocabulary():
        rows = probe_hf_model(model, ids)
    for row, tr in zip(rows, trace_hf_model(model, ids), strict=True):
        assert list(row)[-2:] == [TOY.name, "dtype"] and TOY_HEAD.name not in row
        q, k = tr.q.double().numpy(), tr.k.double().numpy()
        assert k.shape[-1] < q.shape[-1]
        assert row[TOY.name] == pytest.approx(float(np.abs(q).mean() / np.abs(k).mean()), rel=1e-12)


def test_an_older_store_without_the_toy_column_still_reads(tmp_path: Path) -> None:
    with toy_vocabulary(schema=False):
        _, reports = train()
    store = Store(str(tmp_path / "store"))
    write_rows(store, ident(1), reports, drop=(TOY.name, TOY_HEAD.name))  # the schema of today's store
    old_files = data_files(tmp_path / "store", "layers")
    assert old_files and all(TOY.name not in pq.read_schema(f).names for f in old_files)
    with toy_vocabulary():
        write_rows(store, ident(2), reports)
        back = store.read("layers").sort_values(["seed", "epoch", "layer"])
        old, new = back[back["seed"] == 1], back[back["seed"] == 2]
        assert len(old) == len(new) == len(reports) * tiny_model_cfg().n_layer
        assert old[TOY.name].isna().all() and old[TOY_HEAD.name].isna().all()
        assert new[TOY.name].notna().all()
        assert (old["pr_q"].to_numpy() == new["pr_q"].to_numpy()).all()  # the same run, written twice
        stats = write_report(str(tmp_path / "store"), str(tmp_path / "report"), figures=False)
    by_init = stats["layer_metrics"]["by_init"][INIT]
    assert by_init["pr_q"]["n"] == 2 and by_init[TOY.name]["n"] == 1  # the old run has no toy value
    final = [row[TOY.name] for row in reports[-1].layers]
    assert by_init[TOY.name]["mean"] == pytest.approx(np.mean(final), rel=1e-12)
