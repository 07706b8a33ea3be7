"""Full-precision float32 matmuls for the probe (SPEC §4.1), whatever the process chose for training.

Training on CUDA may allow TF32 (``torch.backends.cuda.matmul.fp32_precision = "tf32"``): float32
matmuls then round their inputs to 10 mantissa bits, which moves the probe's float32 ``q @ kᵀ``
by ~1e-3 relative. ``full_precision()`` pins every ``fp32_precision`` setting a float32 product
of the probe could read to ``"ieee"`` (PyTorch's current per-backend API; never the legacy
``allow_tf32`` flags or ``torch.set_float32_matmul_precision``, see pytorch#166387) and turns
autocast off, and puts every setting back as it was afterwards, on an error too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch

#: The ``torch.backends`` settings held at ``"ieee"`` inside ``full_precision``: cuBLAS matmuls,
#: cuDNN convolutions and RNNs (TF32 by default), oneDNN (CPU) matmuls (TF32 or bf16 where
#: ``torch.set_float32_matmul_precision("high"/"medium")`` asked for it on AMX hardware).
SETTINGS: tuple[str, ...] = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul")
IEEE = "ieee"


def _setting(path: str):
    """The ``torch.backends`` object whose ``fp32_precision`` ``path`` names (``"cuda.matmul"``)."""
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def precisions() -> dict[str, str]:
    """Each of ``SETTINGS``' current ``fp32_precision`` (``"none"``: inherited from its parent)."""
    return {path: _setting(path).fp32_precision for path in SETTINGS}


def set_precisions(values: Mapping[str, str]) -> None:
    """Set each named setting's ``fp32_precision`` (``"ieee"``, ``"tf32"``, ``"bf16"``, ``"none"``)."""
    for path, value in values.items():
        _setting(path).fp32_precision = value


@contextmanager
def full_precision(device_type: str | None = None) -> Iterator[None]:
    """Inside the block every float32 matmul runs in full float32 precision (``"ieee"``) and, for
    ``device_type`` (``"cpu"``, ``"cuda"``), autocast is off; the previous settings are restored
    after. Process-wide (torch's settings are global): for a caller, like the probe, that runs no
    other torch work meanwhile.
    """
    saved = precisions()
    try:
        set_precisions(dict.fromkeys(SETTINGS, IEEE))
        if device_type is None or not torch.amp.is_autocast_available(device_type):
            yield
        else:
            with torch.autocast(device_type, enabled=False):
                yield
    finally:
        set_precisions(saved)
