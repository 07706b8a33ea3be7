"""metrics/columns.py: the store's column vocabulary below the Ray layer; the schemas built from it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import replace

import pytest

from metrics.columns import (
    CHECKPOINT_METRICS,
    CHECKPOINT_PROBE_ROW,
    CHECKPOINT_SET,
    CHECKPOINT_SETTINGS,
    LAYER_COLUMNS,
    LAYER_METRICS,
    LayerMetric,
    check_layer_columns,
)

#: sha256 of each table's serialized Arrow schema before the vocabulary moved out of
#: sweep/store/schema.py (commit 8e57fe5): the move changed no name, type or order. The columns
#: added since, ``strengths`` (dose–response, SPEC §6), the epochs' ``time`` (trackers: when the
#: row was written, for the trackers), ``skipped_steps``, the checkpoints' probe settings
#: (``CHECKPOINT_SETTINGS``, SPEC §7) and their set and seed (``CHECKPOINT_SET``), are taken out before
#: comparing, and
#: the one renamed since, ``condition``, gets back its old name ``intervention``.
SCHEMA_SHA256 = {
    "layers": "8ed34516532a7549045df15973d5a783266cbbfa97d65aea3d5369b443e12e35",
    "epochs": "9104aa8aee43ff26569a3d89f21eaac74edbd255975996c30a61fe3f7029333e",
    "checkpoints": "e3609540f4698b26fe3a7288e75c27d4e8b70d3ed4a98bd205cc48dff1276378",
}


def test_schemas_byte_identical_to_before_the_move() -> None:
    from sweep.store.schema import SCHEMAS

    def before(schema, table):
        since = ("strengths", "time", "skipped_steps", *CHECKPOINT_SETTINGS)
        for added in since + (CHECKPOINT_SET if table == "checkpoints" else ()):  # the runs' own seed stays
            i = schema.get_field_index(added)
            schema = schema if i < 0 else schema.remove(i)
        i = schema.get_field_index("condition")
        return schema if i < 0 else schema.set(i, schema.field(i).with_name("intervention"))

    got = {t: hashlib.sha256(before(s, t).serialize().to_pybytes()).hexdigest() for t, s in SCHEMAS.items()
           if t in SCHEMA_SHA256}  # the runs table came later (trackers read it)
    assert got == SCHEMA_SHA256
    assert [t for t, s in SCHEMAS.items() if "strengths" in s.names] == ["layers", "epochs", "runs"]


def test_vocabulary_imports_without_ray_arrow_or_torch() -> None:
    code = ("import sys, metrics.columns; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'pyarrow', 'torch', 'sweep'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_checkpoint_probe_rows_use_the_vocabulary() -> None:
    import torch
    import transformers as tf

    from metrics.hf_arch import tiny_config
    from metrics.hf_probe import probe_hf_model
    from sweep.store.schema import CHECKPOINTS

    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(tiny_config("llama"))
    row = probe_hf_model(model, torch.randint(0, 100, (2, 8)))[0]
    assert tuple(row) == CHECKPOINT_PROBE_ROW
    assert set(CHECKPOINT_METRICS) <= set(CHECKPOINTS.names) and set(CHECKPOINT_METRICS) <= set(LAYER_METRICS)
    import metrics.hf_probe

    assert not hasattr(metrics.hf_probe, "_COLUMNS")


def test_every_vocabulary_function_resolves_and_every_entry_has_a_meaning() -> None:
    from metrics.probe import resolve

    for m in LAYER_COLUMNS:
        assert callable(resolve(m.compute)), m.name
        assert m.meaning and "\n" not in m.meaning, m.name


@pytest.mark.parametrize("bad, match", [
    (LayerMetric("pr_q", "activation", ("q",), "m:f", "taken"), "taken"),
    (LayerMetric("toy", "activation", ("wq",), "m:f", "a weight input on the activation side"), "neither"),
    (LayerMetric("toy", "weight", ("pr_q",), "m:f", "an activation column on the weight side"), "neither"),
    (LayerMetric("toy", "weight", ("wq",), "m.f", "no colon"), "bad side"),
    (LayerMetric("toy", "weight", ("wq",), "m:f", "bad kind", "int"), "bad side"),
    (LayerMetric("toy", "weight", ("wq",), "m:f", "batched not a bool", batched="yes"), "bad side"),
])
def test_the_vocabulary_check_refuses_bad_entries(bad: LayerMetric, match: str) -> None:
    check_layer_columns(LAYER_COLUMNS)
    with pytest.raises(ValueError, match=match):
        check_layer_columns((*LAYER_COLUMNS, bad))
    with pytest.raises(ValueError, match="neither"):  # a derived column must come after its inputs
        check_layer_columns((replace(LAYER_COLUMNS[2], name="early", inputs=("late",)),
                             replace(LAYER_COLUMNS[0], name="late")))
