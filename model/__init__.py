"""The model: NanoGPT-style decoder, Q/K init regimes, corpora and the one trainer (one run or a pack)."""

from model.gpt import GPT, AttentionTrace, GPTConfig
from model.qk_init import QK_INITS, build_model

__all__ = ["GPT", "AttentionTrace", "GPTConfig", "QK_INITS", "build_model"]
