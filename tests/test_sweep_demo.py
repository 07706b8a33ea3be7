"""sweep/demo.py: a store the checkpoint step would refuse is refused before anything trains."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sweep.cli import UsageError
from sweep.demo import check_probe_settings
from sweep.extension import ExtensionSettings
from sweep.extension.cli import default_probe_text
from sweep.extension.record import ProbeRecord
from sweep.extension.revision_probe import Job, ProbeSettings, checkpoint_rows
from sweep.store import Store
from sweep.store.schema import CHECKPOINT_METRICS


def test_a_store_probed_with_another_transformers_is_refused_before_training(tmp_path: Path) -> None:
    """The demo's step 3 (its probe settings, this transformers) against rows a former transformers
    wrote: one line before the sweeps (before, after both sweeps had trained); a new store passes."""
    root = tmp_path / "store"
    extension = ExtensionSettings(ProbeSettings(str(root), n_seqs=8, seq_len=64, cpus=1.0), actors=2)
    check_probe_settings(str(root), extension)  # no store yet
    old = replace(ProbeRecord.of(extension.probe, default_probe_text()), transformers="4.0.0")
    layers = [{"layer": 0, **dict.fromkeys(CHECKPOINT_METRICS, 1.0), "dtype": "float32", "weights_sha256": "ab"}]
    Store(str(root)).write_checkpoint(checkpoint_rows(Job("tiny-gpt2-chars", "step1", None, "/x", 0, 0, 0.0), layers,
                                                      record=old))
    with pytest.raises(UsageError, match=r"transformers 4\.0\.0 \(series tiny-gpt2-chars\); this run would probe"):
        check_probe_settings(str(root), extension)
