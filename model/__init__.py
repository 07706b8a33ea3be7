"""The model: NanoGPT-style decoder, Q/K init regimes, corpora and a single-run trainer."""

from model.gpt import GPT, AttentionTrace, GPTConfig
from model.qk_init import QK_INITS, build_model

__all__ = ["GPT", "AttentionTrace", "GPTConfig", "QK_INITS", "build_model"]
