"""The layer probe (SPEC §4.1): every per-layer column of ``metrics.columns.LAYER_COLUMNS``.

``probe_layers`` runs one no-grad pass of the model's probe path, stacks the layers'
traces along a leading dimension N and reduces them all at once with ``probe_rows``:
each function the vocabulary names (``metrics.spectra``, ``metrics.attention``, ...)
runs once over the N items (a ``LayerMetric`` with ``batched=False`` once per item),
the float64 SVDs on the CPU or the model's device (``decomp_device``), and every
value reaches the host in one transfer. ``probe_members`` does the same for a pack
(a GPT with stacked parameters, ``model.members`` = M): one probe pass of the stacked
model and one ``probe_rows`` over N = M × L (member, layer) items, one host read.

The model must take ``model(idx, None, trace)`` (the probe path of ``model.gpt.GPT``,
filling ``trace`` with one trace per layer) and expose ``blocks[i].attn.{q_proj, k_proj,
n_head}``. The probe's float32 matmuls never use TF32 and never autocast
(``metrics.precision.full_precision``), whatever the process set for training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

import torch
from torch import Tensor, nn

from metrics import columns
from metrics.columns import PER_HEAD, LayerMetric
from metrics.precision import full_precision
from metrics.spectra import decompositions_on, svdvals

Value = float | list[float]
DecompDevice = Literal["auto", "cpu", "same"] | str | torch.device

#: Items are reduced in chunks whose float64 scores [n, B, H, T, T] take at most this many
#: bytes, by the device the inputs are on. On a GPU few large chunks (fewer launches; the
#: attention statistics hold a few such tensors at their peak: 512 MiB is 4096 matrices of
#: 128 × 128); on the CPU chunks that stay in cache (at paper width one layer, 64 matrices:
#: ~30 % less CPU time than all 8 layers at once, LOG.md).
CHUNK_BYTES = {"cpu": 8 << 20, "other": 512 << 20}
#: On the CPU the probe pass runs over chunks of the probe batch whose float32 scores of one
#: layer take at most this many bytes (a pack's full-batch tensors, 50-170 MB at paper width,
#: made its pass ~4× slower per member than one run's, LOG.md); on a GPU in one pass.
PASS_BYTES = 8 << 20


def resolve(path: str) -> Callable[..., Any]:
    """The function a ``LayerMetric.compute`` names (``"module:function"``), looked up on each call."""
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


def entries(side: str) -> tuple[LayerMetric, ...]:
    """The vocabulary's entries of one ``side`` (``"activation"`` or ``"weight"``), read at call time."""
    return tuple(m for m in columns.LAYER_COLUMNS if m.side == side)


# -- the batched reduction ------------------------------------------------------------------


def _signature(x: Any) -> tuple:
    """What two calls' arguments must share to be joined along N: a tensor's item shape,
    dtype and device, or an equal plain value."""
    if isinstance(x, Tensor):
        return ("tensor", tuple(x.shape[1:]), x.dtype, x.device)
    return ("value", x)


def _joined_calls(metrics: Sequence[LayerMetric], known: Mapping[str, Any]) -> dict[tuple, Any]:
    """Results of the batched calls whose inputs are all given tensors, by (compute, inputs).

    Calls of one function on like inputs run as one call over their inputs concatenated
    along N (``effective_rank`` of wq and of wk: one SVD batch [2N, D, D]) and are split
    back. Calls reading earlier columns run later, in ``_columns``.
    """
    groups: dict[tuple, list[tuple[str, ...]]] = {}
    for m in metrics:
        if m.batched and all(i in known for i in m.inputs):
            sig = (m.compute, tuple(_signature(known[i]) for i in m.inputs))
            if m.inputs not in groups.setdefault(sig, []):
                groups[sig].append(m.inputs)
    out: dict[tuple, Any] = {}
    for (compute, _), calls in groups.items():
        args = [torch.cat([known[c[j]] for c in calls]) if len(calls) > 1 and isinstance(known[calls[0][j]], Tensor)
                else known[calls[0][j]] for j in range(len(calls[0]))]
        got = resolve(compute)(*args)
        n = next(known[i].shape[0] for i in calls[0] if isinstance(known[i], Tensor))
        for j, inputs in enumerate(calls):
            part = slice(j * n, (j + 1) * n)
            out[(compute, inputs)] = ({k: v[part] for k, v in got.items()} if isinstance(got, Mapping)
                                      else got[part])
    return out


def _as_tensor(value: Any, device: torch.device) -> Tensor:
    """One item's value (a tensor, a number or a sequence of numbers) as float64 on ``device``."""
    if isinstance(value, Tensor):
        return value.to(device=device, dtype=torch.float64)
    if isinstance(value, Sequence):
        return torch.tensor([float(v) for v in value], dtype=torch.float64, device=device)
    return torch.tensor(float(value), dtype=torch.float64, device=device)


def _per_item(fn: Callable[..., Any], args: Sequence[Any], n: int) -> list[Any]:
    """A per-layer function called on each item's slices (plain values passed as they are)."""
    return [fn(*(a[i] if isinstance(a, Tensor) else a for a in args)) for i in range(n)]


def _columns(metrics: Sequence[LayerMetric], inputs: Mapping[str, Any], n: int,
             device: torch.device) -> dict[str, Tensor]:
    """Each column of ``metrics`` for n items, in order: [n] (``PER_HEAD``: [n, n_head]) float64
    on ``device``. inputs: tensors with the leading n, and plain values (``n_head``).

    Each distinct (function, inputs) runs once; a derived column (``pr_q_minus_pr_k``) reads
    the earlier columns.
    """
    known: dict[str, Any] = dict(inputs)
    calls = _joined_calls(metrics, known)
    out: dict[str, Tensor] = {}
    for m in metrics:
        key = (m.compute, m.inputs)
        if key not in calls:
            args = [known[i] for i in m.inputs]
            calls[key] = resolve(m.compute)(*args) if m.batched else _per_item(resolve(m.compute), args, n)
        got = calls[key]
        if m.batched:
            value = _as_tensor(got[m.name] if isinstance(got, Mapping) else got, device)
        else:
            value = torch.stack([_as_tensor(g[m.name] if isinstance(g, Mapping) else g, device) for g in got])
        want = (n, -1) if m.kind == PER_HEAD else (n,)
        known[m.name] = out[m.name] = value.reshape(want)
    return out


def _rows(metrics: Sequence[LayerMetric], table: list[list[float]], values: Mapping[str, Tensor]) -> list[dict[str, Value]]:
    """Rows of plain floats from the host table (one line per item, the columns side by side)."""
    spans, at = {}, 0
    for m in metrics:
        width = values[m.name].shape[1] if m.kind == PER_HEAD else 1
        spans[m.name], at = (at, width), at + width
    return [{m.name: line[spans[m.name][0]:sum(spans[m.name])] if m.kind == PER_HEAD else line[spans[m.name][0]]
             for m in metrics} for line in table]


def reduce_items(metrics: Sequence[LayerMetric], inputs: Mapping[str, Any], n: int, *,
                 decomp_device: DecompDevice = "auto", chunk_bytes: int | None = None) -> list[dict[str, Value]]:
    """The columns of ``metrics`` for each of n items, one dict per item (floats; lists for
    ``PER_HEAD``).

    inputs: by name, tensors with the leading n (``ACTIVATION_INPUTS`` / ``WEIGHT_INPUTS``
    stacked) and plain values (``n_head``). The activation side is reduced in chunks of items
    whose float64 ``scores`` [n, B, H, T, T] take at most ``chunk_bytes`` (default
    ``CHUNK_BYTES`` of the inputs' device); the weight side, small, in one (all n items'
    W_Q and W_K in one SVD batch, spread over the CPU threads). The float64 SVDs run on
    ``decomposition_device(decomp_device, ...)``; float32 matmuls in full precision
    (``full_precision``); one transfer brings every value to the host.
    """
    tensors = [x for x in inputs.values() if isinstance(x, Tensor)]
    if not tensors or any(x.shape[0] != n for x in tensors):
        raise ValueError(f"every input tensor needs the leading dimension n={n}: "
                         f"{ {k: tuple(x.shape) for k, x in inputs.items() if isinstance(x, Tensor)} }")
    home = tensors[0].device
    scores = inputs.get("scores")
    if chunk_bytes is None:
        chunk_bytes = CHUNK_BYTES["cpu" if home.type == "cpu" else "other"]
    per_item = scores[0].numel() * 8 if isinstance(scores, Tensor) else 1
    decomp = decomposition_device(decomp_device, scores if isinstance(scores, Tensor) else tensors[0])
    sides: dict[str, list[LayerMetric]] = {}
    for m in metrics:  # a column reads only its own side's inputs and columns (check_layer_columns)
        sides.setdefault(m.side, []).append(m)
    parts: dict[str, list[Tensor]] = {m.name: [] for m in metrics}
    with full_precision(home.type), decompositions_on(decomp):
        for side, group in sides.items():
            step = max(1, chunk_bytes // per_item) if side == "activation" else n
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                chunk = {k: x[lo:hi] if isinstance(x, Tensor) else x for k, x in inputs.items()}
                for name, value in _columns(group, chunk, hi - lo, home).items():
                    parts[name].append(value)
    values = {name: torch.cat(p) for name, p in parts.items()}
    table = torch.cat([values[m.name].reshape(n, -1) for m in metrics], dim=1).tolist()  # the one host read
    return _rows(metrics, table, values)


def probe_rows(q: Tensor, k: Tensor, scores: Tensor, wq: Tensor | None = None, wk: Tensor | None = None,
               n_head: int | None = None, *, decomp_device: DecompDevice = "auto",
               chunk_bytes: int | None = None) -> list[dict[str, Value]]:
    """Every §4.1 column (except ``layer`` and the gradient norms) of N items, one dict each.

    q: [N, B, T, H·d_head], k: [N, B, T, H_kv·d_head] (projection outputs, heads
    concatenated); scores: [N, B, H, T, T] unmasked; wq, wk: [N, D, D] ([out, in]) with
    ``n_head``, or both None for the activation side alone (the checkpoint probe). An item
    is a layer, or a (member, layer) of packed trials: nothing assumes N = layers. Columns
    in vocabulary order, activation side first. ``decomp_device``: where the float64 SVDs
    run, ``"cpu"``, ``"same"`` (the inputs' device), a device, or ``"auto"`` (see
    ``decomposition_device``); the values agree to ~1e-15 whichever is chosen. ``chunk_bytes``:
    see ``reduce_items``.
    """
    metrics = list(entries("activation"))
    inputs: dict[str, Any] = {"q": q, "k": k, "scores": scores}
    if (wq is None) != (wk is None) or (wq is not None and n_head is None):
        raise ValueError("pass wq, wk and n_head together, or none of them")
    if wq is not None:
        metrics += entries("weight")
        inputs.update(wq=wq, wk=wk, n_head=n_head)
    return reduce_items(metrics, inputs, q.shape[0], decomp_device=decomp_device, chunk_bytes=chunk_bytes)


def activation_columns(q: Tensor, k: Tensor, scores: Tensor, *,
                       decomp_device: DecompDevice = "auto") -> dict[str, Value]:
    """Activation-side columns of one layer. q: [B, T, H·d_head]; k: [B, T, H_kv·d_head]
    (heads concatenated); scores: [B, H, T, T] unmasked."""
    return probe_rows(q[None], k[None], scores[None], decomp_device=decomp_device)[0]


def weight_columns(wq: Tensor, wk: Tensor, n_head: int, *, decomp_device: DecompDevice = "auto") -> dict[str, Value]:
    """Weight-side columns of one layer. wq, wk: [d_model, d_model] ([out, in]).

    ``qk_alignment_head`` is a list of n_head floats (head h: rows h*d_head:(h+1)*d_head).
    """
    inputs = {"wq": wq[None], "wk": wk[None], "n_head": n_head}
    return reduce_items(entries("weight"), inputs, 1, decomp_device=decomp_device)[0]


# -- where the decompositions run -------------------------------------------------------------

#: "auto"'s measured choice per (device, matrix shape, CPU threads), once per process.
_AUTO_CHOICE: dict[tuple, torch.device] = {}
#: Matrices of the real batch timed on each side to choose (after one untimed call).
CALIBRATION_MATRICES = 64


def decomposition_device(choice: DecompDevice, like: Tensor) -> torch.device:
    """The device the float64 SVDs of a probe of ``like`` (its scores, [..., T, T]) run on.

    ``"cpu"``, ``"same"`` (like's device) or a device name are taken as they are. ``"auto"``:
    the CPU for CPU tensors; otherwise whichever of the CPU (transfer included) and like's
    device decomposed ``CALIBRATION_MATRICES`` of like's own matrices faster, measured on
    the first call and kept for the process (LOG.md, a cheap per-epoch probe).
    """
    if choice == "same":
        return like.device
    if choice != "auto":
        return torch.device(choice)
    if like.device.type == "cpu":
        return like.device
    key = (str(like.device), tuple(like.shape[-2:]), torch.get_num_threads())
    if key not in _AUTO_CHOICE:
        sample = like.reshape(-1, *like.shape[-2:])[:CALIBRATION_MATRICES]
        _AUTO_CHOICE[key] = faster({d: _decomposition_seconds(sample, d) for d in (torch.device("cpu"), like.device)})
    return _AUTO_CHOICE[key]


def faster(seconds: Mapping[torch.device, float]) -> torch.device:
    """The device of the fewest seconds (the first listed on a tie)."""
    return min(seconds, key=seconds.__getitem__)


def _decomposition_seconds(sample: Tensor, device: torch.device) -> float:
    """Wall seconds of ``svdvals`` of ``sample`` on ``device``, the copy there included; the
    best of two timed calls after an untimed one."""
    def run() -> float:
        _sync(sample.device)
        t0 = time.perf_counter()
        with decompositions_on(device):
            svdvals(sample)
        _sync(device)
        _sync(sample.device)
        return time.perf_counter() - t0

    run()
    return min(run(), run())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- the trainer's probe ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeInputs:
    """``probe_rows``' inputs for N items (see there for shapes): N = L layers, or M × L
    (member, layer) items of a pack, member-major (item m·L + l is member m's layer l)."""

    q: Tensor
    k: Tensor
    scores: Tensor
    wq: Tensor
    wk: Tensor
    n_head: int


def _items(per_layer: Sequence[Tensor], members: int | None) -> Tensor:
    """Per-layer tensors [...] stacked as items [L, ...]; a pack's [M, ...] as [M·L, ...], member-major."""
    return torch.stack(list(per_layer)) if members is None else torch.stack(list(per_layer), dim=1).flatten(0, 1)


class _TracesDone(Exception):
    """Raised by the hook on the last layer's attention: every trace the probe reads is taken."""


def _traces(model: nn.Module, tokens: Tensor) -> list[Any]:
    """The probe path's per-layer traces (``model(tokens, None, trace)``, as ``model.probe``), the
    forward stopped once the last layer's attention has recorded its trace: the last MLP, the
    final LayerNorm and the LM head (a pack of 12 at paper width: [12, 16, 128, 1758] float32
    logits, 173 MB) feed no probe column. ~40 % of a paper-width depth-4 probe pass (LOG.md)."""
    traces: list[Any] = []

    def done(*_: Any) -> None:
        raise _TracesDone

    handle = model.blocks[-1].attn.register_forward_hook(done)
    try:
        model(tokens, None, traces)
    except _TracesDone:
        pass
    finally:
        handle.remove()
    return traces


def _batch_step(model: nn.Module, tokens: Tensor, members: int | None) -> int:
    """Sequences per probe pass: all B on a GPU; on the CPU as many as keep one layer's float32
    scores [M, b, H, T, T] within ``PASS_BYTES`` (one run at paper width: all 16; a pack of 12:
    2, so a pack's pass works in cache-sized tensors like one run's, LOG.md)."""
    B, T = tokens.shape
    if tokens.device.type != "cpu":
        return B
    per_sequence = (members or 1) * model.blocks[0].attn.n_head * T * T * 4
    return max(1, min(B, PASS_BYTES // per_sequence))


def _gathered(chunks: Sequence[Sequence[Tensor]], members: int | None, batch_dim: int) -> Tensor:
    """``_items`` of per-layer tensors given in batch chunks: chunks[c][l] is layer l's tensor for
    chunk c, its batch at dimension ``batch_dim`` from the end; written once into the result."""
    if len(chunks) == 1:
        return _items(chunks[0], members)
    first = chunks[0][0]
    at = first.dim() - batch_dim  # the batch's dimension: 0, a pack's 1 (after M)
    out = first.new_empty(*first.shape[:at], len(chunks[0]), sum(c[0].shape[at] for c in chunks),
                          *first.shape[at + 1:])  # [L, B, ...] (a pack: [M, L, B, ...])
    lo = 0
    for chunk in chunks:
        for layer, t in enumerate(chunk):
            out.select(at, layer).narrow(at, lo, t.shape[at]).copy_(t)
        lo += chunk[0].shape[at]
    return out if members is None else out.flatten(0, 1)


@torch.no_grad()
def probe_inputs(model: nn.Module, tokens: Tensor) -> ProbeInputs:
    """The no-grad probe pass of ``model`` on tokens [B, T], in eval mode (the previous mode
    restored afterwards) and full float32 precision (``full_precision``): its layers' traces
    and Q/M weights stacked, N = L (a pack, ``model.members`` = M: N = M·L, member-major).
    On the CPU a pack's pass runs over chunks of the batch (``_batch_step``)."""
    members = getattr(model, "members", None)
    step = _batch_step(model, tokens, members)
    was_training = model.training
    model.eval()
    qs, ks, scores = [], [], []
    try:
        with full_precision(tokens.device.type):
            for lo in range(0, tokens.shape[0], step):
                traces = _traces(model, tokens[lo:lo + step])
                # q, k: [B, H, T, d_head] (a pack: [M, B, H, T, d_head]) → [B, T, H·d_head], heads concatenated
                qs.append([tr.q.transpose(-3, -2).flatten(-2) for tr in traces])
                ks.append([tr.k.transpose(-3, -2).flatten(-2) for tr in traces])
                scores.append([tr.scores for tr in traces])  # [B, H, T, T] (a pack: [M, B, H, T, T])
                del traces
    finally:
        model.train(was_training)
    attn = [block.attn for block in model.blocks]
    return ProbeInputs(_gathered(qs, members, 3), _gathered(ks, members, 3), _gathered(scores, members, 4),
                       _items([a.q_proj.weight.detach() for a in attn], members),  # [D, D] (a pack: [M, D, D])
                       _items([a.k_proj.weight.detach() for a in attn], members), attn[0].n_head)


def probe_layers(model: nn.Module, tokens: Tensor, *, decomp_device: DecompDevice = "auto") -> list[dict[str, Value]]:
    """One dict per layer (0 = embedding side) with every §4.1 column except grad norms.

    tokens: [B, T] int64 on the model's device. Runs in eval mode and restores
    the model's previous mode afterwards. For a pack see ``probe_members``.
    """
    x = probe_inputs(model, tokens)
    rows = probe_rows(x.q, x.k, x.scores, x.wq, x.wk, x.n_head, decomp_device=decomp_device)
    return [{"layer": layer, **row} for layer, row in enumerate(rows)]


def probe_members(model: nn.Module, tokens: Tensor, *, decomp_device: DecompDevice = "auto",
                  members: Sequence[int] | None = None) -> list[list[dict[str, Value]]]:
    """``probe_layers`` of each member: one list of per-layer rows per member, in member order.

    A plain model (``members`` None) is one member: ``[probe_layers(model, tokens)]``. A pack
    (stacked parameters [M, ...], ``model.members`` = M) is probed in one call: one probe pass
    of the stacked model on the shared tokens [B, T], one ``probe_rows`` over its M·L (member,
    layer) items (one SVD batch per kind and chunk, spread over the CPU threads or on
    ``decomp_device``), one host read. Member m's rows equal ``probe_layers`` of its own plain
    GPT to rounding (the batched kernels sum in another order: ~1e-13 relative in float64).
    ``members`` (a pack only): reduce just these members' items, rows in that order (a trainer
    leaves out a member whose weights turned non-finite: its decompositions would fail).
    """
    k = getattr(model, "members", None)
    if k is None:
        return [probe_layers(model, tokens, decomp_device=decomp_device)]
    chosen = list(range(k)) if members is None else list(members)
    x = probe_inputs(model, tokens)
    n_layer = x.q.shape[0] // k
    if chosen != list(range(k)):
        idx = torch.tensor([m * n_layer + layer for m in chosen for layer in range(n_layer)], device=x.q.device)
        x = ProbeInputs(*(t.index_select(0, idx.to(t.device)) for t in (x.q, x.k, x.scores, x.wq, x.wk)), x.n_head)
    rows = probe_rows(x.q, x.k, x.scores, x.wq, x.wk, x.n_head, decomp_device=decomp_device)
    return [[{"layer": layer, **rows[i * n_layer + layer]} for layer in range(n_layer)] for i in range(len(chosen))]
