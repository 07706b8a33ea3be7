"""The store's column vocabulary (SPEC §4.1, §6, §7): names and order, no Ray, no Arrow.

``metrics/`` (the trainer's layer probe, the checkpoint probe) and
``sweep/store/schema.py`` (the Arrow schemas) all read these tuples, so a new
per-layer metric is its function in ``metrics/`` plus its name here. Every
name below is a float64 column of the table that lists it unless said
otherwise; ``sweep.store.schema`` adds the identity, key and status columns.
"""

from __future__ import annotations

#: Columns measured on a probe batch's activations (SPEC §4.1, §7), float64: the trainer's probe
#: and the checkpoint probe both emit them, in this order.
ACTIVATION_METRICS: tuple[str, ...] = (
    "pr_q",
    "pr_k",
    "pr_q_minus_pr_k",
    "qk_erank",
    "attn_entropy",
    "attn_top1",
    "attn_erank",
    "logit_std",
)
#: Per-layer geometry columns (SPEC §4.1), float64, in the order the probe emits them: the
#: activation columns, then those of the Q/K weights.
LAYER_METRICS: tuple[str, ...] = ACTIVATION_METRICS + (
    "wq_erank",
    "wk_erank",
    "wq_erank_head",
    "wk_erank_head",
    "qk_alignment",
    "wq_norm",
    "wk_norm",
)
#: Per-layer gradient columns, filled by the trainer; null at epoch 0 (no step taken yet).
LAYER_GRAD_METRICS: tuple[str, ...] = ("grad_norm_q", "grad_norm_k")

#: Per-head columns (SPEC §4 "also reported per head"): a list<float64> per row, one value
#: per head h = 0..n_head-1 (head h owns rows h*d_head:(h+1)*d_head of W_Q and W_K).
#: ``qk_alignment_head[h]`` = mean over that head's rows i of |cos(W_Q[i,:], W_K[i,:])|;
#: its mean over heads equals ``qk_alignment`` when no row is zero. Null in stores
#: written before the column existed.
LAYER_HEAD_METRICS: tuple[str, ...] = ("qk_alignment_head",)

#: Run-level float columns per epoch; ``train_loss`` and ``grad_norm`` are null at epoch 0.
EPOCH_METRICS: tuple[str, ...] = ("train_loss", "val_loss", "grad_norm", "wall_s", "tokens_per_s")

#: Columns the checkpoint probe measures (SPEC §7): the activation columns, no weights.
CHECKPOINT_METRICS: tuple[str, ...] = ACTIVATION_METRICS

#: One row of ``metrics.hf_probe.probe_hf_model``, in order: the layer (int), the
#: checkpoint metrics, and ``dtype`` (a string: the dtype the probe computed in).
CHECKPOINT_PROBE_ROW: tuple[str, ...] = ("layer", *CHECKPOINT_METRICS, "dtype")
