"""The model: NanoGPT-style decoder, Q/K init regimes, corpora and the one trainer (one run or a pack).

The names below load on first use, so ``model.floors`` imports without torch; importing the package
first checks torch's and numpy's versions against their floors (``model.floors``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from model.floors import check_floors

check_floors(("torch", "numpy"))

_WHERE = {"GPT": "model.gpt", "AttentionTrace": "model.gpt", "GPTConfig": "model.gpt",
          "QK_INITS": "model.qk_init", "build_model": "model.qk_init"}

__all__ = ["GPT", "AttentionTrace", "GPTConfig", "QK_INITS", "build_model"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
