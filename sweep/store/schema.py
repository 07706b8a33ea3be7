"""Arrow schemas of the store's three tables (SPEC §6).

The column names, their order and the per-layer metrics' kinds come from
``metrics.columns`` (no Ray, no Arrow there), which ``metrics/`` reads too. Every
writer and reader uses these, so an all-null column keeps its type and two runs
written months apart concatenate cleanly: the store reads by name, and a column
missing from an older file reads as null. Bump ``SCHEMA_VERSION`` when a column
changes meaning; add columns at the end, except a per-layer metric: its column
follows the other metrics of its kind (``layers_schema``); a renamed column goes
in ``RENAMED``, so older files read under the new name.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

# The column vocabulary lives below the Ray layer (metrics/ reads it too); re-exported here.
from metrics.columns import (
    ACTIVATION_METRICS,  # noqa: F401 (re-exported)
    CHECKPOINT_METRICS,
    CHECKPOINT_SET,
    CHECKPOINT_SETTINGS,
    EPOCH_METRICS,
    FLOAT,
    LAYER_COLUMNS,
    LAYER_GRAD_METRICS,
    LAYER_HEAD_METRICS,  # noqa: F401 (re-exported)
    LAYER_METRICS,  # noqa: F401 (re-exported)
    PER_HEAD,
    LayerMetric,
)

# A run's identity is plain Python (the parsers compute it without Arrow); re-exported here.
from sweep.store.ids import run_id, strengths_json  # noqa: F401 (re-exported)

SCHEMA_VERSION = 1

TABLES = ("layers", "epochs", "checkpoints", "runs")

#: Identity of a training run; ``run_id`` is derived from the others (see ``run_id``).
RUN_IDENTITY: list[pa.Field] = [
    pa.field("sweep", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("init", pa.string(), nullable=False),
    pa.field("depth", pa.int32(), nullable=False),
    pa.field("seed", pa.int64(), nullable=False),
    pa.field("condition", pa.string(), nullable=False),  # ``intervention`` in older stores (RENAMED)
]

#: Columns renamed since stores were first written: name -> the name older files hold it under. The
#: store reads such a file's column under the new name (``sweep.store.parquet``); writers use only the new.
RENAMED: dict[str, str] = {"condition": "intervention"}

#: Run status values: ``running`` while epochs remain, then ``completed`` or ``diverged``.
STATUSES = ("running", "completed", "diverged")



def layers_schema(metrics: Sequence[LayerMetric]) -> pa.Schema:
    """The ``layers`` table with the per-layer columns of ``metrics``: the float64 ones after
    ``layer``, then the gradient columns, the per-head list<float64> ones after ``schema_version``."""
    return pa.schema(
        RUN_IDENTITY
        + [pa.field("epoch", pa.int32(), nullable=False), pa.field("layer", pa.int32(), nullable=False)]
        + [pa.field(m.name, pa.float64()) for m in metrics if m.kind == FLOAT]
        + [pa.field(c, pa.float64()) for c in LAYER_GRAD_METRICS]
        + [pa.field("schema_version", pa.int32(), nullable=False)]
        + [pa.field(m.name, pa.list_(pa.float64())) for m in metrics if m.kind == PER_HEAD]
        + [pa.field("strengths", pa.string())]  # see strengths_json
    )


LAYERS = layers_schema(LAYER_COLUMNS)

EPOCHS = pa.schema(
    RUN_IDENTITY
    + [pa.field("epoch", pa.int32(), nullable=False)]
    + [pa.field(c, pa.float64()) for c in EPOCH_METRICS]
    + [
        pa.field("tokens_seen", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("strengths", pa.string()),  # see strengths_json
        # when the trial wrote the epoch's rows (UTC): what a tracker stamps the epoch with (SPEC §6.1);
        # null in stores written before the column
        pa.field("time", pa.timestamp("ms", tz="UTC")),
        # optimiser steps of the epoch that fp16 loss scaling skipped (an inf/NaN gradient; SPEC §3):
        # null at epoch 0, on the diverged row and in stores written before the column
        pa.field("skipped_steps", pa.float64()),  # a count; float64 as pandas reads a nullable column
    ]
)

#: Columns read off a clock (durations, rates, timestamps): they differ between two runs of the
#: same cell; every other column of ``layers`` and ``epochs`` repeats exactly on the same machine.
CLOCK_COLUMNS: tuple[str, ...] = ("wall_s", "tokens_per_s", "time")

CHECKPOINTS = pa.schema(
    [
        pa.field("series", pa.string(), nullable=False),
        pa.field("repo", pa.string()),
        pa.field("revision", pa.string(), nullable=False),
        pa.field("step", pa.int64()),
        pa.field("tokens", pa.int64()),
        pa.field("progress", pa.float64()),
        # dtype the probe computed in ("float32" on every device, SPEC §7); null in older stores
        pa.field("dtype", pa.string()),
        pa.field("layer", pa.int32()),  # null on the single row recording a failed revision
    ]
    + [pa.field(c, pa.float64()) for c in CHECKPOINT_METRICS]
    + [
        pa.field("status", pa.string(), nullable=False),  # "ok", "failed" or "duplicate_of:<revision>"
        pa.field("reason", pa.string()),  # why a revision failed; null when ok
        pa.field("schema_version", pa.int32(), nullable=False),
        # sha256 of the revision's weight *values* (tensor names, shapes, values in a canonical dtype; the same
        # for any file format, shard layout or exact dtype: sweep.extension.integrity); a revision repeating
        # another's weights in its series has status "duplicate_of:<revision>". Null on failed rows.
        pa.field("weights_sha256", pa.string()),
    ]
    # how the row was measured (SPEC §7 "Probe settings"): --n-seqs, --seq-len (int32), the probe text's
    # sha256 and the transformers version (strings); on every row, failed ones too. Null in older stores.
    + [pa.field(c, pa.int32() if c in ("probe_n_seqs", "probe_seq_len") else pa.string()) for c in CHECKPOINT_SETTINGS]
    # the series' set, its seed in it and what the set's seeds vary (SPEC §7 "Sets"); null for a series in
    # no set and in older stores
    + [pa.field(c, pa.string()) for c in CHECKPOINT_SET]
)

#: One row per run of a sweep, written by the sweep's driver before its trials start (and again when
#: it resumes): what the run was started with besides its identity, so that the store alone can say
#: it (``python -m sweep.store export`` sends it to a tracker). Stores written before it lack it.
RUNS = pa.schema(
    RUN_IDENTITY
    + [
        pa.field("experiment", pa.string(), nullable=False),  # the sweep's --name (Tune's experiment)
        pa.field("trial", pa.string(), nullable=False),  # Tune's trial name
        pa.field("pack", pa.int32(), nullable=False),  # runs in that trial (1: unpacked)
        pa.field("member", pa.int32(), nullable=False),  # this run's place among them, 0-based
        pa.field("model", pa.string(), nullable=False),  # the GPTConfig, canonical JSON (sorted keys)
        pa.field("train", pa.string(), nullable=False),  # the TrainConfig with the run's seed, canonical JSON
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("strengths", pa.string()),  # see strengths_json
    ]
)

SCHEMAS: dict[str, pa.Schema] = {"layers": LAYERS, "epochs": EPOCHS, "checkpoints": CHECKPOINTS, "runs": RUNS}

#: Columns that identify one row of each table: no two rows may share them.
KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("run_id", "epoch", "layer"),
    "epochs": ("run_id", "epoch"),
    "checkpoints": ("series", "revision", "layer"),
    "runs": ("run_id",),
}
