"""The model: NanoGPT-style decoder, Q/K init regimes, corpora and the one trainer (one run or a pack).

The names below load their modules when first used (PEP 562), so that importing a light submodule
(``model.floors``, ``model.plugins``, ``model.qk_init``'s registry for a parser) does not import
torch; importing the package first checks torch's and numpy's installed versions against their
floors (``model.floors``, metadata only).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from model.floors import check_floors

check_floors(("torch", "numpy"))

if TYPE_CHECKING:
    from model.config import GPTConfig
    from model.gpt import GPT, AttentionTrace
    from model.qk_init import QK_INITS, build_model

_WHERE = {"GPT": "model.gpt", "AttentionTrace": "model.gpt", "GPTConfig": "model.config",
          "QK_INITS": "model.qk_init", "build_model": "model.qk_init"}
__all__ = ["GPT", "AttentionTrace", "GPTConfig", "QK_INITS", "build_model"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
