"""Probe a Hugging Face causal LM for the checkpoint columns of SPEC §7.

Per layer: ``pr_q``, ``pr_k`` (participation ratio of the projection outputs
*before* rotary, heads concatenated; K over its own KV heads; after the Q/K
norm in families that have one, see ``metrics.hf_arch``) and the
attention statistics of ``metrics.attention.attention_stats`` on the scores
the model itself computes (after rotary, with the model's own scaling, KV
heads expanded for grouped-query attention).

How the tensors are captured (transformers 5.x):

* **Pre-rotary Q and K**: forward hooks on the modules each family's adapter
  names (``metrics.hf_arch.ADAPTERS``), whose outputs are cloned (OLMo's
  ``clip_qkv`` clamps them in place afterwards, so PR is that of ``q_proj(x)``
  itself). Fused layouts are split exactly as the model splits them: GPT-2
  ``c_attn`` and Phi-3 ``qkv_proj`` as blocks [Q | K | V]; GPT-NeoX
  ``query_key_value`` per head, ``view(B, T, H, 3·d_head).chunk(3, -1)``.
  The captured widths are checked against the adapter's head counts
  (H·d_head for Q, H_kv·d_head for K).
* **Scores**: for the duration of the probe the model's attention
  implementation is switched to ``"qkgeom_capture"``, registered in
  ``transformers.AttentionInterface`` (with ``masking_utils.eager_mask`` in
  ``AttentionMaskInterface``, so it receives the same additive causal mask as
  eager attention). Every attention module hands it the post-rotary query and
  key and its own ``scaling`` (GPT-2's ``scale_attn_by_inverse_layer_idx`` is
  folded into ``GPT2Attention.scaling``); it computes
  ``S = q·expand(k)ᵀ·scaling`` in float32, records S before the mask, and
  finishes attention exactly as the eager implementation does (mask added,
  float32 softmax, cast to V's dtype, product with V). On float32 weights this
  is the eager computation operation for operation; in bf16 S is computed in
  float32 from the bf16 q and k, as GPT-2's ``reorder_and_upcast_attn`` does.
  Probabilities cannot be turned back into scores (softmax drops a per-row
  constant), which is why ``output_attentions`` is not used.

The probe runs one no-grad forward pass of the base model (the decoder stack; the unembedding,
which no column reads, is not run) on [B, T] token ids without padding,
at positions 0..T−1, and restores the model's mode and attention
implementation afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from metrics import columns
from metrics.columns import ACTIVATION_INPUTS, FLOAT
from metrics.hf_arch import SUPPORTED_MODEL_TYPES, adapter_for
from metrics.probe import activation_columns

__all__ = ["CAPTURE_IMPLEMENTATION", "PROBE_DTYPE", "SUPPORTED_MODEL_TYPES", "probe_hf_model", "probe_pass"]

CAPTURE_IMPLEMENTATION = "qkgeom_capture"

#: The probe computes in float32 on every device (SPEC §7) and records it in each row.
PROBE_DTYPE = torch.float32

_TAP_ATTR = "_qkgeom_tap"


@dataclass
class _Tap:
    """A per-layer sink: ``emit(layer, name, tensor)`` with name in q / k / scores."""

    emit: Callable[[int, str, Tensor], None]
    layer: int


@dataclass
class _LayerSpec:
    """Where one layer's Q, K and attention live, and how to split a fused projection."""

    attention: nn.Module
    hooks: list[tuple[nn.Module, Callable[[Tensor], dict[str, Tensor]]]] = field(default_factory=list)


def _capture_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[Tensor, Tensor]:
    """Eager attention that also records the scaled, unmasked scores.

    query: [B, H, T, d]; key, value: [B, H_kv, S, d]; attention_mask: additive
    [B, 1, T, S] or None (then causal). Returns ([B, T, H, d], probs [B, H, T, S]).
    """
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    n_rep = query.shape[1] // key.shape[1]
    key = _expand_kv(key, n_rep)  # (B, H, S, d)
    value = _expand_kv(value, n_rep)
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scaling  # (B, H, T, S)
    tap: _Tap | None = getattr(module, _TAP_ATTR, None)
    if tap is not None:
        tap.emit(tap.layer, "scores", scores)
    if attention_mask is None:
        t, s = scores.shape[-2:]
        allowed = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril(s - t)
        masked = scores.masked_fill(~allowed, float("-inf"))
    elif attention_mask.dtype == torch.bool:
        masked = scores.masked_fill(~attention_mask, float("-inf"))
    else:
        masked = scores + attention_mask
    probs = torch.softmax(masked, dim=-1, dtype=torch.float32).to(value.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs, value).transpose(1, 2).contiguous()  # (B, T, H, d)
    return out, probs


def _expand_kv(x: Tensor, n_rep: int) -> Tensor:
    """[B, H_kv, S, d] → [B, H_kv·n_rep, S, d], each KV head repeated for its query group."""
    if n_rep == 1:
        return x
    b, h_kv, s, d = x.shape
    return x[:, :, None].expand(b, h_kv, n_rep, s, d).reshape(b, h_kv * n_rep, s, d)


AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capture_attention)
AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, eager_mask)


def _layer_specs(model: nn.Module) -> list[_LayerSpec]:
    """One spec per decoder layer, embedding side first, from the family's adapter (``metrics.hf_arch``)."""
    adapter = adapter_for(model.config.model_type)
    return [_LayerSpec(attention, taps) for attention, taps in adapter.layer_taps(model)]


@contextmanager
def _tapped(model: nn.Module, emit: Callable[[int, str, Tensor], None]) -> Iterator[int]:
    """Install Q/K hooks and the capturing attention; always remove them. Yields the layer count."""
    specs = _layer_specs(model)
    handles = []
    previous = model.config._attn_implementation
    was_training = model.training
    try:
        for layer, spec in enumerate(specs):
            setattr(spec.attention, _TAP_ATTR, _Tap(emit, layer))
            for module, split in spec.hooks:
                handles.append(module.register_forward_hook(_projection_hook(emit, layer, split)))
        model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
        if model.config._attn_implementation != CAPTURE_IMPLEMENTATION:
            raise RuntimeError(f"{type(model).__name__} refused the capturing attention function")
        model.eval()
        yield len(specs)
    finally:
        for h in handles:
            h.remove()
        for spec in specs:
            if hasattr(spec.attention, _TAP_ATTR):
                delattr(spec.attention, _TAP_ATTR)
        if model.config._attn_implementation != previous:
            model.set_attn_implementation(previous)
        model.train(was_training)


def _projection_hook(
    emit: Callable[[int, str, Tensor], None], layer: int, split: Callable[[Tensor], dict[str, Tensor]]
) -> Callable[[nn.Module, tuple, Tensor], None]:
    def hook(_module: nn.Module, _inputs: tuple, output: Tensor) -> None:
        for name, x in split(output.detach()).items():
            emit(layer, name, x.clone())  # clone: OLMo's clip_qkv clamps the output in place later

    return hook


def _forward(model: nn.Module, input_ids: Tensor) -> None:
    """One causal pass of the base model (the decoder, without the unembedding: no column reads the
    vocabulary logits, which cost Pythia-14M a third of its probe) at positions 0..T−1, no padding.
    input_ids: [B, T]."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, T], got {tuple(input_ids.shape)}")
    model.base_model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False)


@torch.no_grad()
def probe_hf_model(model: nn.Module, input_ids: Tensor) -> list[dict[str, float]]:
    """One dict per layer (0 = embedding side) with ``layer`` and the SPEC §7 columns.

    input_ids: [B, T] int64 on the model's device, equal-length sequences.
    Columns: the float64 activation-side columns of ``metrics.columns.LAYER_COLUMNS``
    (pr_q, pr_k, pr_q_minus_pr_k, qk_erank, attn_entropy, attn_top1, attn_erank,
    logit_std), and ``dtype`` (the dtype the pass ran in: always "float32"). A model
    whose floating parameters are not float32 is cast to float32 in place first (load
    float32 weights to avoid a bf16 round trip). Each layer is reduced as soon as its
    q, k and scores are all captured, so only one layer's scores are held at a time.
    """
    if any(p.is_floating_point() and p.dtype != PROBE_DTYPE for p in model.parameters()):
        model.to(PROBE_DTYPE)
    return probe_pass(model, lambda: _forward(model, input_ids))


@torch.no_grad()
def probe_pass(model: nn.Module, run: Callable[[], object]) -> list[dict[str, float]]:
    """The rows of ``probe_hf_model`` for whatever pass ``run()`` makes through ``model`` (float32
    weights): the capture is installed around it. ``metrics.hf_stream`` runs the base model with
    its decoder blocks read from disk one at a time; ``probe_hf_model`` runs the whole model."""
    dtype = str(PROBE_DTYPE).removeprefix("torch.")
    wanted = [m.name for m in columns.LAYER_COLUMNS if m.side == "activation" and m.kind == FLOAT]
    rows: list[dict[str, float]] = []
    pending: list[dict[str, Tensor]] = []
    dims: list[dict[str, int]] = []

    def emit(layer: int, name: str, x: Tensor) -> None:
        if name != "scores":
            dims[layer][name] = x.shape[-1]
        got = pending[layer]
        got[name] = x
        if all(n in got for n in ACTIVATION_INPUTS):
            rows[layer].update(activation_columns(got["q"], got["k"], got["scores"]))
            got.clear()

    with _tapped(model, emit) as n_layers:
        rows.extend({"layer": layer} for layer in range(n_layers))
        pending.extend({} for _ in range(n_layers))
        dims.extend({} for _ in range(n_layers))
        run()
    heads = adapter_for(model.config.model_type).heads(model.config)
    for row, got, seen in zip(rows, pending, dims, strict=True):
        for name, want in (("q", heads.q_dim), ("k", heads.k_dim)):
            if seen.get(name, want) != want:
                raise RuntimeError(f"layer {row['layer']}: captured {name.upper()} has {seen[name]} dims, the "
                                   f"config's heads give {want} ({heads}): the adapter does not fit this model")
        if len(row) == 1:
            missing = [n for n in ACTIVATION_INPUTS if n not in got]
            raise RuntimeError(f"layer {row['layer']}: nothing captured for {missing}")
    return [{"layer": row["layer"], **{c: row[c] for c in wanted}, "dtype": dtype} for row in rows]
