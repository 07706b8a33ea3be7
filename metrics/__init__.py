"""Geometry metrics: pure functions of tensors (SPEC §4)."""

from metrics.attention import attention_stats, causal_mask
from metrics.probe import probe_layers
from metrics.spectra import (
    effective_rank,
    participation_ratio,
    qk_alignment,
    qk_alignment_per_head,
)

__all__ = [
    "attention_stats",
    "causal_mask",
    "effective_rank",
    "participation_ratio",
    "probe_layers",
    "qk_alignment",
    "qk_alignment_per_head",
]
