"""Decoder families the checkpoint probe knows: one ``ArchAdapter`` per ``config.model_type``.

An adapter says, for one family of Hugging Face causal LMs (checked against
the transformers 5.25 ``modeling_*.py`` sources):

* ``layers``: the decoder blocks, embedding side first;
* ``attention``: the attribute of a block holding its attention module (the
  module that calls the attention function, so the probe's capturing
  attention sees its post-rotary q, k and its own ``scaling``);
* ``taps``: where the pre-rotary Q and K are read and how a fused projection
  is split (``separate``, ``fused_blocks`` [Q | K | V] in that order with
  Q = H·d_head and K = H_kv·d_head columns, ``fused_per_head`` GPT-NeoX's
  per-head interleaving, ``after_qk_norm`` and ``per_head_norms`` for Q/K-norm
  families);
* ``heads``: query heads, KV heads (grouped-query attention) and d_head, from
  the config's own attributes (``num_key_value_heads``, ``head_dim``);
* ``rotary``: the positional convention (documentation; the model applies it);
* ``tiny``: the config fields of a tiny random model of the family, from which
  the tests build their models (``tiny_config``).

A new family is one entry in ``ADAPTERS`` (+ its test model). ``adapter_for``
refuses any other ``model_type`` naming the supported ones; it needs only the
``model_type`` string, so a revision is refused from ``config.json`` alone.

Q/K norms (OLMo-2, StableLM's ``qk_layernorm``): pr_q and pr_k are taken *after*
the norms (OLMo-2 ``q_norm``/``k_norm``, StableLM's per-head LayerNorms) and
before rotary. The norm is part of the map that makes the vectors the model
dots: every logit is built from q_norm(q_proj(x)) and k_norm(k_proj(x)), and
the learned per-channel gain of the norm reshapes their covariance. PR of
q_proj(x) itself would describe vectors the attention never sees (their
per-token scale is erased by the RMS division). Rotary stays excluded, as for
every family, because it is a position-dependent rotation and probe positions
are fixed (CHECKPOINTS.md); OLMo-1's ``clip_qkv`` stays excluded too (a clamp,
off in the public OLMo-1B), as before.

This module imports neither torch nor transformers at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor, nn

#: Splits one projection module's output [B, T, ·] into named parts {"q": [B, T, H·d], "k": [B, T, H_kv·d]}.
Split = Callable[["Tensor"], dict[str, "Tensor"]]
#: (module, split): a forward hook on ``module`` hands its output to ``split``.
Tap = tuple["nn.Module", Split]


class UnsupportedArchitecture(ValueError):
    """A ``model_type`` without an adapter; the message names the supported ones."""


@dataclass(frozen=True)
class Heads:
    """Head counts of one model: H query heads, H_kv key/value heads, d_head each."""

    n_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def q_dim(self) -> int:
        """Width of the concatenated pre-rotary Q: H·d_head."""
        return self.n_heads * self.head_dim

    @property
    def k_dim(self) -> int:
        """Width of the concatenated pre-rotary K: H_kv·d_head (PR_K is bounded by it)."""
        return self.n_kv_heads * self.head_dim


def config_heads(config: Any) -> Heads:
    """Heads from the config's own attributes: ``num_attention_heads``, ``num_key_value_heads``
    (absent or null: no grouping), ``head_dim`` (absent or null: hidden_size / heads)."""
    n = int(config.num_attention_heads)
    kv = getattr(config, "num_key_value_heads", None) or n
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n
    return Heads(n, int(kv), int(head_dim))


# --- where Q and K are read -----------------------------------------------------------------


def separate(q: str = "q_proj", k: str = "k_proj") -> Callable[[nn.Module, Heads], list[Tap]]:
    """Q and K from two modules of the attention (their outputs as they are)."""

    def taps(attn: nn.Module, heads: Heads) -> list[Tap]:
        return [(getattr(attn, q), _named("q")), (getattr(attn, k), _named("k"))]

    return taps


def after_qk_norm(q: str = "q_norm", k: str = "k_norm") -> Callable[[nn.Module, Heads], list[Tap]]:
    """Q and K from the Q/K-norm modules (norm applied, rotary not yet): see the module docstring."""
    return separate(q, k)


def fused_blocks(name: str) -> Callable[[nn.Module, Heads], list[Tap]]:
    """One projection [B, T, H·d + 2·H_kv·d] laid out [Q | K | V] (GPT-2 ``c_attn``, Phi-3 ``qkv_proj``)."""

    def taps(attn: nn.Module, heads: Heads) -> list[Tap]:
        def split(y: Tensor) -> dict[str, Tensor]:
            q, k, _ = y.split([heads.q_dim, heads.k_dim, y.shape[-1] - heads.q_dim - heads.k_dim], dim=-1)
            return {"q": q, "k": k}

        return [(getattr(attn, name), split)]

    return taps


def fused_per_head(name: str) -> Callable[[nn.Module, Heads], list[Tap]]:
    """One projection [B, T, 3·H·d] interleaved per head (GPT-NeoX ``query_key_value``):
    ``view(B, T, H, 3·d).chunk(3, -1)`` gives Q, K, V per head."""

    def taps(attn: nn.Module, heads: Heads) -> list[Tap]:
        def split(y: Tensor) -> dict[str, Tensor]:
            b, t, _ = y.shape
            q, k, _ = y.view(b, t, heads.n_heads, 3 * heads.head_dim).chunk(3, dim=-1)  # (B, T, H, d)
            return {"q": q.reshape(b, t, -1), "k": k.reshape(b, t, -1)}

        return [(getattr(attn, name), split)]

    return taps


def per_head_norms(q: str, k: str) -> Callable[[nn.Module, Heads], list[Tap]]:
    """Q and K from per-head norm modules whose outputs are [B, H, T, d] (StableLM's
    ``q_layernorm``/``k_layernorm``), concatenated back to [B, T, H·d]."""

    def heads_last(name: str) -> Split:
        def split(y: Tensor) -> dict[str, Tensor]:
            b, h, t, d = y.shape
            return {name: y.transpose(1, 2).reshape(b, t, h * d)}

        return split

    def taps(attn: nn.Module, heads: Heads) -> list[Tap]:
        return [(getattr(attn, q), heads_last("q")), (getattr(attn, k), heads_last("k"))]

    return taps


def _stablelm_taps(attn: nn.Module, heads: Heads) -> list[Tap]:
    """StableLM: after the per-head Q/K LayerNorms when ``qk_layernorm`` is on, else the projections."""
    if getattr(attn, "qk_layernorm", False):
        return per_head_norms("q_layernorm", "k_layernorm")(attn, heads)
    return separate()(attn, heads)


def _named(name: str) -> Split:
    return lambda y: {name: y}


# --- where the layers are -------------------------------------------------------------------


def blocks(attr: str) -> Callable[[nn.Module], Sequence[nn.Module]]:
    """The decoder blocks at ``model.base_model.<attr>``, cut at ``config.num_hidden_layers``."""

    def layers(model: nn.Module) -> Sequence[nn.Module]:
        return list(getattr(model.base_model, attr))[: model.config.num_hidden_layers]

    return layers


# --- the adapters ---------------------------------------------------------------------------

_ROPE = "rotate-half rotary on all of d_head (RoPE), applied to Q and K after the taps"


@dataclass(frozen=True)
class ArchAdapter:
    """How the probe finds one family's layers, Q, K and heads (see the module docstring)."""

    model_type: str
    family: str  # what it is called, with a public example
    layers: Callable[[nn.Module], Sequence[nn.Module]]
    attention: str
    taps: Callable[[nn.Module, Heads], list[Tap]]
    rotary: str
    tiny: Mapping[str, Any] = field(default_factory=dict)
    heads: Callable[[Any], Heads] = config_heads
    qk_norm: str | None = None  # where Q/K norms sit, when the family has them
    #: regexes of tensors older checkpoints of the family store that are no weights (constant buffers this
    #: transformers no longer has): a stored one is dropped, as from_pretrained drops ``attn.bias``
    #: (``metrics.hf_files.ignored_unexpected``); any other tensor without a place fails the revision
    stale: tuple[str, ...] = ()

    def layer_taps(self, model: nn.Module) -> list[tuple[nn.Module, list[Tap]]]:
        """(attention module, its taps) per decoder layer, embedding side first."""
        heads = self.heads(model.config)
        return [(getattr(b, self.attention), self.taps(getattr(b, self.attention), heads))
                for b in self.layers(model)]


_SMALL = {"vocab_size": 100, "max_position_embeddings": 64, "bos_token_id": 0, "eos_token_id": 0}
_DECODER = {**_SMALL, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 64}

ADAPTERS: dict[str, ArchAdapter] = {
    a.model_type: a
    for a in (
        ArchAdapter(
            "gpt2", "GPT-2 (Stanford CRFM runs)", blocks("h"), "attn", fused_blocks("c_attn"),
            "none (learned absolute positions); GPT2Attention.scaling folds in "
            "scale_attn_by_inverse_layer_idx",
            tiny={"vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
                  "bos_token_id": 0, "eos_token_id": 0},
            stale=(r"(^|\.)attn\.masked_bias$",),  # transformers < 4.2x saved it (-1e4), 5.x has no such buffer
        ),
        ArchAdapter(
            "gpt_neox", "GPT-NeoX (Pythia)", blocks("layers"), "attention", fused_per_head("query_key_value"),
            "rotate-half rotary on the first partial_rotary_factor of d_head (Pythia: 25 %)",
            tiny={**_DECODER},
        ),
        ArchAdapter(
            "llama", "Llama (SmolLM2)", blocks("layers"), "self_attn", separate(), _ROPE,
            tiny={**_DECODER, "num_key_value_heads": 2},
        ),
        ArchAdapter(
            "olmo", "OLMo (OLMo-1B-hf)", blocks("layers"), "self_attn", separate(),
            _ROPE + "; clip_qkv clamps Q, K, V after the taps", tiny={**_DECODER, "pad_token_id": 1},
        ),
        ArchAdapter(
            "qwen2", "Qwen2 / Qwen2.5", blocks("layers"), "self_attn", separate(),
            _ROPE + "; Q/K projections have biases", tiny={**_DECODER, "num_key_value_heads": 2},
        ),
        ArchAdapter(
            "mistral", "Mistral", blocks("layers"), "self_attn", separate(),
            _ROPE + "; sliding-window mask (probe windows must fit in it)",
            tiny={**_DECODER, "num_key_value_heads": 2, "sliding_window": 64},
        ),
        ArchAdapter(
            "gemma", "Gemma", blocks("layers"), "self_attn", separate(),
            _ROPE + "; head_dim is its own config field (d_head ≠ d_model / H in general)",
            tiny={**_DECODER, "num_key_value_heads": 2, "head_dim": 16},
        ),
        ArchAdapter(
            "phi3", "Phi-3", blocks("layers"), "self_attn", fused_blocks("qkv_proj"),
            "rotate-half rotary on the first partial_rotary_factor of d_head; fused qkv_proj [Q | K | V]",
            tiny={**_DECODER, "num_key_value_heads": 2, "pad_token_id": 1},
        ),
        ArchAdapter(
            "olmo2", "OLMo-2", blocks("layers"), "self_attn", after_qk_norm(),
            _ROPE + "; RMSNorm over all heads' Q (and K) before rotary",
            tiny={**_DECODER, "num_key_value_heads": 2, "pad_token_id": 1},
            qk_norm="q_norm/k_norm (RMSNorm over H·d_head) between the projection and rotary: "
            "pr_q/pr_k are taken after it",
        ),
        ArchAdapter(
            "stablelm", "StableLM", blocks("layers"), "self_attn", _stablelm_taps,
            "rotate-half rotary on the first partial_rotary_factor of d_head (default 25 %)",
            tiny={**_DECODER, "num_key_value_heads": 2, "qk_layernorm": True, "use_qkv_bias": True},
            heads=lambda c: Heads(c.num_attention_heads, c.num_key_value_heads,
                                  c.hidden_size // c.num_attention_heads),  # StableLmAttention ignores head_dim
            qk_norm="optional per-head LayerNorms (qk_layernorm) after the projection: pr_q/pr_k are taken after "
            "them, as for OLMo-2",
        ),
    )
}

#: Architectures (``config.model_type``) the probe knows how to split.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(ADAPTERS)


def adapter_for(model_type: str | None) -> ArchAdapter:
    """The adapter of ``model_type``; else ``UnsupportedArchitecture`` naming the supported types."""
    if model_type not in ADAPTERS:
        raise UnsupportedArchitecture(
            f"model_type {model_type!r} is not supported by the checkpoint probe; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)} (a new family is one adapter in metrics/hf_arch.py)")
    return ADAPTERS[model_type]


def attention_window(config: Any) -> int | None:
    """The sliding-attention window of a config (``sliding_window``; Qwen2 nulls it unless
    ``use_sliding_window``), or None. Probe windows longer than it would make the model's
    attention differ from the causal attention the statistics assume."""
    window = getattr(config, "sliding_window", None)
    return int(window) if window else None


def tiny_config(model_type: str, **overrides: Any) -> Any:
    """A tiny config of the family (``ADAPTERS[model_type].tiny`` + ``overrides``), for tests and demos."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{**adapter_for(model_type).tiny, **overrides})
