"""The store's column vocabulary (SPEC §4.1, §6, §7): names, order and how each per-layer
column is computed; no torch, no Ray, no Arrow.

``LAYER_COLUMNS`` is the one place a per-layer metric is declared: its column name, the
inputs it reads, the ``"module:function"`` that computes it (imported only when a probe
runs), its kind and its meaning. ``metrics.probe`` (the trainer's probe),
``metrics.hf_probe`` (the checkpoint probe, activation side only), ``sweep.store.schema``
(the Arrow schemas) and the report (``analysis.layer_metrics``) all iterate over it, so a
new per-layer metric is its function in ``metrics/`` plus one ``LayerMetric`` here. The other tuples name
float64 columns of the table that lists them; ``sweep.store.schema`` adds the identity,
key and status columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Inputs of an activation-side metric, one layer of the probe batch: ``q`` [B, T, H·d_head]
#: and ``k`` [B, T, H_kv·d_head] (projection outputs, heads concatenated, before rotary;
#: H_kv = H except in a grouped-query checkpoint), ``scores`` [B, H, T, T] (q·kᵀ·scale, unmasked).
ACTIVATION_INPUTS: tuple[str, ...] = ("q", "k", "scores")
#: Inputs of a weight-side metric: ``wq``, ``wk`` [d_model, d_model] ([out, in]; head h owns
#: rows h*d_head:(h+1)*d_head) and ``n_head`` (int).
WEIGHT_INPUTS: tuple[str, ...] = ("wq", "wk", "n_head")

FLOAT = "float64"
PER_HEAD = "list<float64>"


@dataclass(frozen=True)
class LayerMetric:
    """One per-layer column and how it is computed.

    ``compute(*inputs)`` returns the value (a float or a 0-d tensor; for ``PER_HEAD`` a
    sequence or a [n_head] tensor) or a mapping holding it under ``name``: entries naming
    the same function and inputs share one call per layer (``attention_stats`` fills five
    columns). An input is one of its side's tensors or an earlier column of the same side.

    ``batched``: False (the default) and ``compute`` is called once per layer with that
    layer's tensors (the shapes of ``ACTIVATION_INPUTS`` / ``WEIGHT_INPUTS``; an earlier
    column as a 0-d or [n_head] float64 tensor). True and it is called once per probe with
    every layer's stacked along a new leading dimension N (layers, or packed members ×
    layers: q [N, B, T, ·], scores [N, B, H, T, T], wq [N, D, D], an earlier column [N] or
    [N, n_head]; ``n_head`` as it is) and returns [N] (``PER_HEAD``: [N, n_head]) or a mapping
    of them; each item's value must depend on that item's slices alone, as the probe may
    split N into chunks and join two calls of one function into one.
    """

    name: str
    side: Literal["activation", "weight"]
    inputs: tuple[str, ...]
    compute: str  # "module:function"
    meaning: str
    kind: Literal["float64", "list<float64>"] = FLOAT
    batched: bool = False


_ATTN = "metrics.attention:batched_attention_stats"

#: Every per-layer metric column, in the order the probe emits them: activation side first.
LAYER_COLUMNS: tuple[LayerMetric, ...] = (
    LayerMetric("pr_q", "activation", ("q",), "metrics.spectra:batched_pooled_participation_ratio",
                "participation ratio of the query vectors of every token, heads concatenated", batched=True),
    LayerMetric("pr_k", "activation", ("k",), "metrics.spectra:batched_pooled_participation_ratio",
                "participation ratio of the key vectors of every token, heads concatenated", batched=True),
    LayerMetric("pr_q_minus_pr_k", "activation", ("pr_q", "pr_k"), "operator:sub", "pr_q − pr_k", batched=True),
    LayerMetric("qk_erank", "activation", ("scores",), _ATTN, "effective rank of the unmasked scores, mean over (b, h)", batched=True),
    LayerMetric("attn_entropy", "activation", ("scores",), _ATTN, "entropy (nats) of the causal attention rows, mean", batched=True),
    LayerMetric("attn_top1", "activation", ("scores",), _ATTN, "largest attention weight of a row, mean", batched=True),
    LayerMetric("attn_erank", "activation", ("scores",), _ATTN, "effective rank of the attention matrix, mean", batched=True),
    LayerMetric("logit_std", "activation", ("scores",), _ATTN, "std of the allowed scores of each (b, h), mean", batched=True),
    LayerMetric("wq_erank", "weight", ("wq",), "metrics.spectra:effective_rank", "effective rank of W_Q", batched=True),
    LayerMetric("wk_erank", "weight", ("wk",), "metrics.spectra:effective_rank", "effective rank of W_K", batched=True),
    LayerMetric("wq_erank_head", "weight", ("wq", "n_head"), "metrics.spectra:head_effective_rank",
                "effective rank of each head's rows of W_Q, mean over heads", batched=True),
    LayerMetric("wk_erank_head", "weight", ("wk", "n_head"), "metrics.spectra:head_effective_rank",
                "effective rank of each head's rows of W_K, mean over heads", batched=True),
    LayerMetric("qk_alignment", "weight", ("wq", "wk"), "metrics.spectra:qk_alignment",
                "mean over rows i of |cos(W_Q[i,:], W_K[i,:])|, zero rows skipped", batched=True),
    # Head h: mean over its rows of |cos|; its mean over heads is qk_alignment when no row is
    # zero. Null in stores written before the column existed.
    LayerMetric("qk_alignment_head", "weight", ("wq", "wk", "n_head"), "metrics.spectra:qk_alignment_per_head",
                "qk_alignment of each head (SPEC §4 'also reported per head')", PER_HEAD, batched=True),
    LayerMetric("wq_norm", "weight", ("wq",), "metrics.spectra:frobenius_norm", "Frobenius norm of W_Q", batched=True),
    LayerMetric("wk_norm", "weight", ("wk",), "metrics.spectra:frobenius_norm", "Frobenius norm of W_K", batched=True),
)


def check_layer_columns(metrics: tuple[LayerMetric, ...]) -> None:
    """Raise ValueError unless names are unique and every input is its side's tensor or an
    earlier column of the same side."""
    tensors = {"activation": ACTIVATION_INPUTS, "weight": WEIGHT_INPUTS}
    seen: dict[str, str] = {}
    for m in metrics:
        if (m.side not in tensors or m.kind not in (FLOAT, PER_HEAD) or m.compute.count(":") != 1
                or not isinstance(m.batched, bool)):
            raise ValueError(f"{m.name}: bad side, kind, compute or batched "
                             f"({m.side!r}, {m.kind!r}, {m.compute!r}, {m.batched!r})")
        if m.name in seen or m.name in tensors["activation"] + tensors["weight"]:
            raise ValueError(f"{m.name}: the name is taken")
        bad = [i for i in m.inputs if i not in tensors[m.side] and seen.get(i) != m.side]
        if bad:
            raise ValueError(f"{m.name}: inputs {bad} are neither {m.side} tensors nor earlier {m.side} columns")
        seen[m.name] = m.side


check_layer_columns(LAYER_COLUMNS)

#: Columns measured on a probe batch's activations (SPEC §4.1, §7), float64: the trainer's probe
#: and the checkpoint probe both emit them, in this order.
ACTIVATION_METRICS: tuple[str, ...] = tuple(m.name for m in LAYER_COLUMNS if m.side == "activation"
                                            and m.kind == FLOAT)
#: Per-layer float64 geometry columns (SPEC §4.1), in the order the probe emits them: the
#: activation columns, then those of the Q/K weights.
LAYER_METRICS: tuple[str, ...] = tuple(m.name for m in LAYER_COLUMNS if m.kind == FLOAT)
#: Per-layer gradient columns, filled by the trainer; null at epoch 0 (no step taken yet).
LAYER_GRAD_METRICS: tuple[str, ...] = ("grad_norm_q", "grad_norm_k")

#: Per-head columns (SPEC §4 "also reported per head"): a list<float64> per row, one value
#: per head h = 0..n_head-1 (head h owns rows h*d_head:(h+1)*d_head of W_Q and W_K).
LAYER_HEAD_METRICS: tuple[str, ...] = tuple(m.name for m in LAYER_COLUMNS if m.kind == PER_HEAD)

#: Run-level float columns per epoch; ``train_loss`` and ``grad_norm`` are null at epoch 0.
EPOCH_METRICS: tuple[str, ...] = ("train_loss", "val_loss", "grad_norm", "wall_s", "tokens_per_s")

#: Columns the checkpoint probe measures (SPEC §7): the activation columns, no weights.
CHECKPOINT_METRICS: tuple[str, ...] = ACTIVATION_METRICS

#: How a checkpoint row was measured (SPEC §6, §7 "Probe settings"): probe sequences, tokens per
#: sequence, the probe text's sha256 and the transformers version that loaded and ran the model.
CHECKPOINT_SETTINGS: tuple[str, ...] = ("probe_n_seqs", "probe_seq_len", "probe_text_sha256", "transformers_version")

#: Where a checkpoint series sits in a set of seeds of one model (SPEC §6, §7 "Sets"): the set
#: (``group``), the seed's label within it (``seed``, a string: "0" is the original series) and the
#: factor its seeds vary (``varies``, one of ``SET_FACTORS``); null for a series in no set.
CHECKPOINT_SET: tuple[str, ...] = ("group", "seed", "varies")
#: What the seeds of a set vary -> how the report says it.
SET_FACTORS: dict[str, str] = {
    "seed": "the seed (weight initialisation and data order together)",
    "weights": "the weight initialisation only (data order fixed)",
    "data order": "the data order only (weight initialisation fixed)",
}

#: One row of ``metrics.hf_probe.probe_hf_model``, in order: the layer (int), the
#: checkpoint metrics, and ``dtype`` (a string: the dtype the probe computed in).
CHECKPOINT_PROBE_ROW: tuple[str, ...] = ("layer", *CHECKPOINT_METRICS, "dtype")
