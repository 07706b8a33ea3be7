"""The checkpoint probe with one decoder block in memory at a time (SPEC §7, "Layer streaming").

``probe_streamed(folder, input_ids)`` returns the rows of ``metrics.hf_probe.probe_hf_model``
for the revision in ``folder`` (config.json + safetensors, one file or shards) without loading
the model: the family's own transformers model is built on the meta device (no memory), and
its base model runs the probe batch as usual, with

* **decoder blocks** (``ArchAdapter.layers``) made real just before each runs: a forward
  pre-hook reads that block's tensors from the safetensors files (``safe_open``, the files
  opened for that read only, so their pages leave the process when it ends) and puts them in
  with ``load_state_dict(assign=True)``; a forward hook puts meta tensors back after it, so
  the batch's residual stream goes through one real block at a time;
* **the input embedding** (``get_input_embeddings()``, the family's own module, Gemma's
  scale included) holding only the rows of the tokens the batch uses (``get_slice`` over
  runs of ids), the batch's ids renumbered into those rows: a lookup, so exact;
* **everything else** the base model's forward uses (GPT-2's position table, final norms)
  read whole (small), and **buffers** (rotary ``inv_freq``, Gemma's ``embed_scale``) made
  real and initialised by the model's own ``_init_weights``, as ``from_pretrained`` does.
  Position ids, rotary angles and the causal mask are the base model's own.

The capture (``metrics.hf_probe.probe_pass``) is the whole-model probe's, installed on the same
module objects (``assign`` swaps tensors, not modules), so the rows equal the whole-model
probe's on float32 weights (tests/test_metrics_hf_stream.py checks every supported family).
Weights are cast to float32 tensor by tensor as they are read. The unembedding is never run.

Stored names map to the model's keys as ``from_pretrained`` maps them (``metrics.hf_files.key_map``:
the family's renames such as GPT-NeoX's ``embed_out`` → ``lm_head``, the base model's prefix added or
stripped — a checkpoint saved from ``GPT2Model`` has ``h.0.…`` —, a tied input embedding stored
under the output embedding's name). Before any block runs, the files are checked to load as shipped:
a missing parameter, a tensor without a place (old masks and ``rotary_emb.inv_freq`` excepted, as
``from_pretrained`` drops them), a wrong shape or an integer weight is a ``CheckpointError`` naming
the tensor and its file. Pickled ``*.bin`` weights are not streamed.

``probe_memory`` estimates the bytes either probe needs, from the config alone (its meta
model's parameter counts), which is how ``sweep.extension`` chooses between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from metrics.hf_arch import adapter_for
from metrics.hf_files import (
    KeyMap,
    WeightSet,
    key_map,
    local_weights,
    open_safetensors,
    tensor_table,
)
from metrics.hf_probe import PROBE_DTYPE, probe_pass

__all__ = ["ProbeMemory", "WeightFiles", "meta_model", "probe_memory", "probe_streamed", "return_large_frees"]


def return_large_frees() -> bool:
    """Have glibc give every freed allocation of 1 MiB or more back to the OS at once (``mallopt``
    ``M_MMAP_THRESHOLD``): by default its threshold rises after each large free, later blocks then
    come from the heap, and a process that frees a block per layer grew ~50 MB per layer in RSS
    (LOG.md). False where there is no glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-3, 1 << 20))  # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        return False


class WeightFiles:
    """The tensors of a revision's safetensors files: name → file, read a few at a time.

    A file is opened (memory-mapped) for one read and closed after it, so what a read touched
    does not stay in the process's resident memory. ``bind(model)`` checks that the files load into
    the model as shipped (``metrics.hf_files.key_map``) and maps its keys to stored names.
    """

    def __init__(self, paths: Sequence[str | Path] | WeightSet) -> None:
        self.weights = paths if isinstance(paths, WeightSet) else None
        files = list(paths.files) if isinstance(paths, WeightSet) else sorted(map(Path, paths))
        for path in files:
            if path.suffix != ".safetensors":
                raise ValueError(f"{path.name}: the layer-streamed probe reads safetensors only")
        self.table = tensor_table(files)
        self.where: dict[str, Path] = {name: info.path for name, info in self.table.items()}
        self.keys: KeyMap | None = None

    def bind(self, model: nn.Module) -> KeyMap:
        """Check the files against ``model`` (a ``CheckpointError`` naming the tensor and file when they
        do not load as shipped); afterwards ``resolve`` follows from_pretrained's mapping."""
        if self.keys is None:
            self.keys = key_map(model, self.table, self.weights)
        return self.keys

    def read(self, names: Mapping[str, str], device: torch.device) -> dict[str, Tensor]:
        """{key: float32 tensor on ``device``} for {key: checkpoint name}, each file opened once."""
        out: dict[str, Tensor] = {}
        by_file: dict[Path, list[tuple[str, str]]] = {}
        for key, name in names.items():
            by_file.setdefault(self.where[name], []).append((key, name))
        for path, wanted in by_file.items():
            with open_safetensors(path) as f:
                for key, name in wanted:
                    out[key] = f.get_tensor(name).to(device=device, dtype=PROBE_DTYPE)
        return out

    def rows(self, name: str, ids: Tensor, device: torch.device) -> Tensor:
        """Rows ``ids`` (sorted, unique, int64) of the 2-D tensor ``name`` as float32 [len(ids), D]."""
        ids_list = ids.tolist()
        runs: list[tuple[int, int]] = []  # [start, stop) of consecutive ids
        for i in ids_list:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        with open_safetensors(self.where[name]) as f:
            table = f.get_slice(name)
            n_rows = table.get_shape()[0]
            if ids_list and not 0 <= ids_list[0] <= ids_list[-1] < n_rows:
                raise ValueError(f"token ids {ids_list[0]}..{ids_list[-1]} outside the {n_rows} rows of {name} "
                                 f"in {self.where[name].name}")
            parts = [table[a:b].to(device=device, dtype=PROBE_DTYPE) for a, b in runs]
        return torch.cat(parts)

    def resolve(self, name: str) -> str | None:
        """The stored name of the model's tensor ``name`` (from_pretrained's mapping: a tied weight may be
        stored under its partner's name); None when the files lack it. Needs ``bind`` first."""
        if self.keys is None:
            raise RuntimeError("WeightFiles.resolve before bind(model)")
        return self.keys.names.get(name)


def meta_model(config: Any) -> nn.Module:
    """The family's causal LM for ``config`` on the meta device, float32, in eval mode (no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=PROBE_DTYPE, trust_remote_code=False)
    return model.eval()


def _to_meta(module: nn.Module, recurse: bool = True) -> None:
    """Replace ``module``'s parameters by meta tensors of the same shape (their memory is freed)."""
    for sub in module.modules() if recurse else (module,):
        for key, p in sub._parameters.items():
            if p is not None and not p.is_meta:
                sub._parameters[key] = nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=False)


def _buffers_real(model: nn.Module, device: torch.device) -> None:
    """Every buffer real on ``device`` and set by the model's own ``_init_weights`` (rotary
    ``inv_freq``, Gemma's ``embed_scale``), as ``from_pretrained`` does for non-persistent ones."""
    owners = []
    for name, buffer in list(model.named_buffers()):
        owner_name, _, key = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        owner._buffers[key] = torch.empty_like(buffer, device=device)
        if owner not in owners:
            owners.append(owner)
    for owner in owners:
        model._init_weights(owner)


def _names(module: nn.Module, prefix: str) -> list[str]:
    """Full state-dict names of ``module``'s parameters and persistent buffers."""
    return [f"{prefix}.{k}" if prefix else k for k in module.state_dict(keep_vars=True)]


@contextmanager
def streaming(model: nn.Module, files: WeightFiles, input_ids: Tensor) -> Iterator[Callable[[], object]]:
    """Make ``model`` (from ``meta_model``) runnable on ``input_ids`` [B, T] with its blocks read
    from ``files`` one at a time (see the module docstring); yields the pass to run."""
    device = input_ids.device
    files.bind(model)  # the files load into the model as shipped, or a CheckpointError names the tensor
    blocks = list(adapter_for(model.config.model_type).layers(model))
    where = {id(m): name for name, m in model.named_modules()}
    embed = model.get_input_embeddings()
    base_name = where[id(model.base_model)]
    block_ids = {id(b) for b in blocks}

    buffer_names = {n for n, _ in model.named_buffers()}
    _buffers_real(model, device)
    unique, inverse = torch.unique(input_ids, return_inverse=True)  # ids -> rows of the gathered table
    embed_weight = f"{where[id(embed)]}.weight"
    with ExitStack() as stack:
        stack.callback(_to_meta, model)
        # everything of the base model outside the blocks and the embedding table: small, read once
        for name, module in model.base_model.named_modules():
            if id(module) in block_ids or module is embed or any(
                    id(m) in block_ids for m in _ancestors(model.base_model, name)):
                continue
            own = [k for k in module.state_dict(keep_vars=True) if "." not in k]
            full = f"{base_name}.{name}".strip(".")
            names = [f"{full}.{k}" if full else k for k in own]
            if names:
                _load_own(module, names, full, files, device, buffer_names)
        found = files.resolve(embed_weight)
        if found is None:
            raise ValueError(f"the weight files lack the input embedding {embed_weight}")
        embed.weight = nn.Parameter(files.rows(found, unique, device), requires_grad=False)
        for block in blocks:
            name = where[id(block)]
            pre = block.register_forward_pre_hook(
                lambda m, _args, n=name: _load_own(m, _names(m, n), n, files, device, buffer_names))
            post = block.register_forward_hook(lambda m, _args, _out: _to_meta(m))
            stack.callback(pre.remove)
            stack.callback(post.remove)
        base = model.base_model
        yield lambda: base(input_ids=inverse, attention_mask=torch.ones_like(inverse), use_cache=False)


def _ancestors(root: nn.Module, name: str) -> list[nn.Module]:
    """The modules on the path from ``root`` down to ``name`` (``name`` itself excluded)."""
    parts = name.split(".") if name else []
    out, module = [], root
    for part in parts[:-1]:
        module = getattr(module, part)
        out.append(module)
    return out


def _load_own(module: nn.Module, names: list[str], name_of: str, files: WeightFiles, device: torch.device,
              buffer_names: set[str]) -> None:
    """Read ``module``'s own tensors (``names``, full state-dict names) into it; a parameter the
    files lack is an error, a persistent buffer they lack keeps its initial value."""
    wanted, missing = {}, []
    for full in names:
        found = files.resolve(full)
        key = full.removeprefix(name_of + ".") if name_of else full
        if found is not None:
            wanted[key] = found
        elif full not in buffer_names:
            missing.append(full)
    if missing:
        raise ValueError(f"the weight files lack {', '.join(missing[:4])}")  # bind() names them first
    module.load_state_dict(files.read(wanted, device), strict=False, assign=True)


@torch.no_grad()
def probe_streamed(folder: str | Path, input_ids: Tensor, files: Sequence[str | Path] | WeightSet | None = None
                   ) -> list[dict[str, float]]:
    """The rows of ``probe_hf_model`` for the revision in ``folder``, one decoder block in memory
    at a time. input_ids: [B, T] int64 on the device to compute on; ``files``: its safetensors
    (default: the ones from_pretrained loads, ``metrics.hf_files.local_weights``). Files that do not
    load into the model as shipped are a ``CheckpointError`` before any block runs."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    adapter_for(getattr(config, "model_type", None))  # an unsupported family is refused before any read
    if files is None:
        files = local_weights(folder)
        if files is None:
            raise ValueError(f"no model.safetensors or model.safetensors.index.json in {folder}: the "
                             "layer-streamed probe reads safetensors only")
    return_large_frees()
    model = meta_model(config)
    with streaming(model, WeightFiles(files), input_ids) as run:
        return probe_pass(model, run)


# --- how much memory each probe needs ---------------------------------------------------------


@dataclass(frozen=True)
class ProbeMemory:
    """Bytes one probe of a revision needs beyond the process's own (imports): ``whole`` loads the
    float32 model (``probe_hf_model``), ``streamed`` holds one float32 block (``probe_streamed``);
    both include the batch's activations. ``block`` and ``params``: the largest block's and the
    model's parameter counts."""

    whole: int
    streamed: int
    params: int
    block: int


def probe_memory(config: Any, n_seqs: int, seq_len: int, max_tensor_bytes: int = 0) -> ProbeMemory:
    """Estimated bytes of each probe of a model with ``config`` on [n_seqs, seq_len] ids.

    From the meta model's parameter counts (4 bytes each in float32): ``whole`` = all of them +
    the logits [B, T, V] + activations (+ ``max_tensor_bytes``, one stored tensor being cast);
    ``streamed`` = twice the largest block (its float32 tensors, and a margin for the allocator
    and the stored tensor being cast) + the gathered embedding rows + activations. Activations:
    per layer, a dozen [B, T, D] states, three [B, T, I] MLP states, Q/K/V three times over,
    and four [B, H, T, T] score-sized tensors (scores, mask, probabilities, the captured copy).
    """
    model = meta_model(config)
    params = sum(p.numel() for p in model.parameters())
    blocks = adapter_for(config.model_type).layers(model)
    block = max(sum(p.numel() for p in b.parameters()) for b in blocks)
    heads = adapter_for(config.model_type).heads(config)
    d = int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d)
    vocab = int(config.vocab_size)
    tokens = n_seqs * seq_len
    qkv = heads.q_dim + 2 * heads.k_dim
    act = 4 * (tokens * (12 * d + 3 * inter + 3 * qkv) + 4 * n_seqs * heads.n_heads * seq_len**2)
    whole = 4 * params + 4 * tokens * vocab + act + max_tensor_bytes
    streamed = 2 * 4 * block + 4 * min(tokens, vocab) * d + act
    return ProbeMemory(int(whole), int(math.ceil(streamed)), params, block)
