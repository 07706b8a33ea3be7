"""The device memory a trainer needs, modelled from its shape (SPEC §5.1). No torch, no Ray.

A trainer of M members holds, per member: its weights, their gradients and AdamW's two moments (16
bytes a parameter, fp32), under fp16/bf16 autocast a half-precision copy of each weight matrix
(autocast casts it for every use inside a CUDA graph and the backward keeps it), and the
activations the backward keeps for one batch of B sequences of T tokens, plus the head's
transient gradients at the start of the backward (the peak). Per trainer, whatever the members:
the training split on the device (int32) and the fixed validation windows (int64). The step and
the validation loss are recorded into one CUDA-graph memory pool (``model.graphs``), so the
validation's temporaries reuse the step's and the peak is the step's.

The activations are counted op by op from ``model.gpt`` (bytes a token, a = 2 under autocast, 4 in
fp32; d width, f = d_mlp, H heads, V vocabulary):

- per layer: the two LayerNorms' inputs and statistics 2·(4d + 8); their outputs as the next
  matmuls keep them, 8d in fp32 or four casts 4·a·d under autocast (q, k, v, fc); q, k, v 3·a·d;
  attention's output a·d and log-sum-exp 4H; the MLP's two activations 2·a·f; a pack's LayerNorm
  (gain applied per member by ``addcmul``) keeps its normalised input too, 2·4d;
- the head: the final LayerNorm 4d + 8, its output 4d (fp32) or a·d, log-softmax's output 4V, the
  targets 8, a pack's normalised input 4d; at the backward's start the gradients of log-softmax and
  of the logits, 8V, and under autocast their half copy a·V.

Tested against the bytes autograd keeps on the CPU (``saved_tensors_hooks``, tests/test_model_memory.py:
exact, fp32 and bf16, one run and a pack); ``bench/gpu.sh`` sets a GPU's peak
(``torch.cuda.max_memory_allocated``) beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: bytes of the CUDA context, cuBLAS/cuDNN workspaces and the caching allocator's slack a trial needs
#: beside its tensors (a guess until bench/gpu.sh measures it)
CONTEXT_BYTES = 768 * 2**20
#: the share of a GPU's free memory a plan lets its packs fill (fragmentation, the probe's transients)
USABLE = 0.85


@dataclass(frozen=True)
class Shape:
    """What the model needs of a run: ``GPTConfig``'s width, depth, heads, MLP, vocabulary and context,
    the batch, and whether autocast runs in half precision (bf16 or fp16)."""

    d_model: int
    n_layer: int
    n_head: int
    d_mlp: int
    vocab_size: int
    context: int
    batch_size: int
    half: bool


def params(s: Shape) -> int:
    """Trained parameters of one member (``GPT.num_params``; the tied head once)."""
    d, f = s.d_model, s.d_mlp
    block = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    return s.n_layer * block + s.vocab_size * d + s.context * d + 2 * d


def half_weights(s: Shape) -> int:
    """Elements of the weight matrices autocast casts (and the backward keeps): q, k, v, out, fc, proj,
    the tied embedding as the head."""
    d, f = s.d_model, s.d_mlp
    return s.n_layer * (4 * d * d + 2 * d * f) + s.vocab_size * d


def saved_per_token(s: Shape, packed: bool) -> float:
    """Bytes the backward keeps per token of one member (module docstring)."""
    d, f, h, v = s.d_model, s.d_mlp, s.n_head, s.vocab_size
    a = 2 if s.half else 4
    layer = 2 * (4 * d + 8) + (4 * a * d if s.half else 8 * d) + 3 * a * d + a * d + 4 * h + 2 * a * f
    head = (4 * d + 8) + (a * d if s.half else 4 * d) + 4 * v + 8
    if packed:
        layer += 2 * 4 * d
        head += 4 * d
    embedding = 8 + 8 / s.batch_size  # the token ids; the positions once a sequence
    return s.n_layer * layer + head + embedding


def transient_per_token(s: Shape) -> float:
    """Bytes a token of the head's gradients adds at the start of the backward (the step's peak)."""
    return (8 + (2 if s.half else 0)) * s.vocab_size


@dataclass(frozen=True)
class Estimate:
    """Bytes: ``member`` each member needs, ``trainer`` its trainer once, ``context`` a trial's
    CUDA context and workspaces (``CONTEXT_BYTES``)."""

    member: int
    trainer: int
    context: int = CONTEXT_BYTES

    def total(self, members: int) -> int:
        """A trial of ``members`` members."""
        return self.context + self.trainer + members * self.member

    def most_members(self, free: int) -> int:
        """The largest pack whose trial fits in ``USABLE`` of ``free`` bytes (0: not even one)."""
        room = free * USABLE - self.context - self.trainer
        return max(0, math.floor(room / self.member))


def estimate(s: Shape, packed: bool, train_tokens: int, eval_batches: int) -> Estimate:
    """The bytes of a trainer of this shape (``packed``: M > 1, whose LayerNorms keep more);
    ``train_tokens``: the training split's length, ``eval_batches``: the validation batches."""
    n = params(s)
    tokens = s.batch_size * s.context
    member = 16 * n + (2 * half_weights(s) if s.half else 0) + tokens * (saved_per_token(s, packed)
                                                                         + transient_per_token(s))
    trainer = 4 * train_tokens + 2 * 8 * eval_batches * tokens
    return Estimate(member=math.ceil(member), trainer=trainer)


def gib(n: float) -> str:
    """Bytes as GiB, one decimal: ``1.2 GiB``."""
    return f"{n / 2**30:.1f} GiB"
