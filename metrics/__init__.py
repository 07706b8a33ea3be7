"""Geometry metrics: pure functions of tensors (SPEC §4).

The names below load on first use, so ``metrics.columns`` (the store's column
vocabulary, read by ``sweep.store.schema``) imports without torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "attention_stats": "metrics.attention",
    "batched_attention_stats": "metrics.attention",
    "batched_pooled_participation_ratio": "metrics.spectra",
    "decompositions_on": "metrics.spectra",
    "probe_rows": "metrics.probe",
    "causal_mask": "metrics.attention",
    "probe_layers": "metrics.probe",
    "probe_members": "metrics.probe",
    "full_precision": "metrics.precision",
    "effective_rank": "metrics.spectra",
    "frobenius_norm": "metrics.spectra",
    "head_effective_rank": "metrics.spectra",
    "pooled_participation_ratio": "metrics.spectra",
    "participation_ratio": "metrics.spectra",
    "qk_alignment": "metrics.spectra",
    "qk_alignment_per_head": "metrics.spectra",
    "svdvals": "metrics.spectra",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'metrics' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
