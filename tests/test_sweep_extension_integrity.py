"""Checkpoint integrity: a revision serving another revision's weights is marked and left out of Appendix A."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from analysis.checkpoints import compute_checkpoints, sentence
from sweep.extension.checkpoint_series import load_manifest
from sweep.extension.integrity import duplicate_status, mark_duplicates, weights_sha256
from sweep.extension.revision_probe import (
    ProbeSettings,
    checkpoint_rows,
    jobs_from_manifest,
    probe_revision,
)
from sweep.extension.tiny_series import build
from sweep.store import Store

TEXT = " ".join(f"def f{i}(x): return x + {i}  # add {i}" for i in range(300))


def test_duplicate_status_points_at_the_latest_revision() -> None:
    revs = pd.DataFrame({"revision": ["s0", "s1", "s2", "s3"], "step": [0.0, 1.0, 2.0, 3.0],
                         "progress": [0.0, 1 / 3, 2 / 3, 1.0], "weights_sha256": ["a", "b", "b", "b"]})
    assert duplicate_status(revs) == {"s1": "duplicate_of:s3", "s2": "duplicate_of:s3"}
    assert duplicate_status(revs.assign(weights_sha256=["a", "b", "c", None])) == {}


@pytest.fixture(scope="module")
def series_with_a_copy(tmp_path_factory) -> Path:
    """The tiny series (steps 0, 5, 10) plus step20, a byte copy of step5's folder."""
    out = tmp_path_factory.mktemp("copied")
    build(out, [0, 5, 10], corpus_spec="stdlib-docs", n_layer=1)
    shutil.copytree(out / "step5", out / "step20")
    data = json.loads((out / "manifest.json").read_text())
    data["series"][0]["revisions"].append({"revision": "step20", "path": "step20", "tokens": 20 * 16 * 64})
    (out / "manifest.json").write_text(json.dumps(data))
    return out


def test_copied_revision_is_marked_and_left_out_of_appendix_a(series_with_a_copy, tmp_path) -> None:
    manifest = load_manifest(series_with_a_copy / "manifest.json", require_paths=True)
    assert [r.revision for r in manifest.series[0].revisions] == ["step0", "step5", "step10", "step20"]
    store = Store(str(tmp_path / "store"))
    settings = ProbeSettings(store.root, n_seqs=2, seq_len=16)
    for job in jobs_from_manifest(manifest):  # what each ProbeActor does, without Ray
        store.write_checkpoint(checkpoint_rows(job, probe_revision(job, TEXT, settings, torch.device("cpu"))))
    df = store.read("checkpoints")
    digests = df.groupby("revision")["weights_sha256"].first()
    assert digests["step5"] == digests["step20"] and digests.nunique() == 3
    assert digests["step0"] == weights_sha256([series_with_a_copy / "step0" / "model.safetensors"])

    name = manifest.series[0].name
    assert mark_duplicates(store, [name]) == {(name, "step5"): "duplicate_of:step20"}
    assert mark_duplicates(store, [name]) == {}  # idempotent
    df = store.read("checkpoints")
    status = df.groupby("revision")["status"].agg(set).to_dict()
    assert status == {"step0": {"ok"}, "step5": {"duplicate_of:step20"}, "step10": {"ok"}, "step20": {"ok"}}

    c = compute_checkpoints(df).result
    assert c.series[name].n_revisions == 3
    assert c.duplicate_revisions == {f"{name}@step5": "step20"}
    assert "Left out of these fits: 1 revision(s)" in sentence(c)
    assert f"{name}@step5 (= step20)" in sentence(c)
