"""The weight files a checkpoint revision loads, and whether they load as shipped (SPEC §7, "Revisions
that do not load as shipped"), decided by transformers' own rules (checked against transformers 5.25).

* ``loader_files``: which of a revision's files ``from_pretrained`` reads — ``model.safetensors`` when
  the revision has it, else the shards that ``model.safetensors.index.json``'s ``weight_map`` names
  (``pytorch_model.bin`` and its index likewise, for pickles). Any other ``*.safetensors`` (an adapter,
  Mistral's ``consolidated.safetensors``, a single file left beside newer shards) is not the model's
  and is never downloaded, hashed or read. The same function serves a local folder (``local_weights``)
  and a hub listing (``sweep.extension.listing``).
* ``tensor_table``: name → shape, dtype and file of every tensor those files hold, from the
  safetensors headers (pickles memory-mapped); a file that cannot be read is named, and so is a
  tensor stored in two files.
* ``key_map``: the model's state-dict keys against that table, mapped as ``from_pretrained`` maps them
  (the family's ``WeightRenaming`` rules, the base model's prefix added or stripped, a tied weight
  stored under either of its names). The revision loads as shipped when every key is found, no tensor
  is left without a place (besides the buffers transformers itself ignores and an adapter's
  ``stale`` buffers), every shape is the model's and every parameter is floating point; otherwise a
  ``CheckpointError`` names the tensor and its file. Non-finite values are found while the weights are
  hashed (``sweep.extension.integrity``).

transformers would load such a revision all the same: a missing parameter initialised at random, an
integer weight cast, an unexpected tensor dropped — and the probe's numbers would describe a model
nobody trained.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["CheckpointError", "KeyMap", "TensorInfo", "WeightSet", "check_loading_info", "key_map", "loader_files",
           "local_weights", "open_safetensors", "parse_index", "read_pickle", "tensor_table"]

#: transformers' own file names (``transformers.utils``): the single file and the index of each format.
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
#: At most this many tensors are named in one error.
NAMED = 3


class CheckpointError(ValueError):
    """A revision's weights do not load as shipped; the message names the tensor and its file."""


# --- which files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightSet:
    """The files ``from_pretrained`` loads: ``files`` (absolute), and the ``index`` that named them
    (None for a single file) with its ``weight_map`` (tensor name → shard file name)."""

    files: tuple[Path, ...]
    index: str | None = None
    weight_map: tuple[tuple[str, str], ...] = ()

    @property
    def pickled(self) -> bool:
        return self.files[0].suffix != ".safetensors"

    def describe(self) -> str:
        """``model.safetensors``, or ``model.safetensors.index.json's 3 shards``."""
        if self.index is None:
            return self.files[0].name
        return f"{self.index}'s {len(self.files)} shard{'s' if len(self.files) > 1 else ''}"

    def home(self, name: str) -> str:
        """The file a tensor should be in: the shard its index names, else ``describe()``."""
        return dict(self.weight_map).get(name) or self.describe()


def loader_files(names: Collection[str], read_index: Callable[[str], Mapping[str, str]], pickled: bool = False
                 ) -> tuple[tuple[str, ...], str | None, Mapping[str, str]]:
    """(file names, index name or None, weight_map) that ``from_pretrained`` loads of one format among a
    revision's top-level file ``names``: its single file, else its index's shards; ((), None, {}) when
    it has neither. ``read_index(name)``: an index file's ``weight_map``. A shard the index names and the
    revision lacks is a ``CheckpointError``."""
    single, index = PICKLE_WEIGHTS if pickled else SAFE_WEIGHTS
    if single in names:
        return (single,), None, {}
    if index not in names:
        return (), None, {}
    weight_map = read_index(index)
    shards = tuple(sorted(set(weight_map.values())))
    if not shards:
        raise CheckpointError(f"{index} maps no tensor to a file")
    lacking = [s for s in shards if s not in names]
    if lacking:
        raise CheckpointError(f"{index} puts tensors in {lacking[0]}, which the revision does not have")
    return shards, index, weight_map


def parse_index(text: str, name: str) -> dict[str, str]:
    """The ``weight_map`` of an index file's ``text``; a ``CheckpointError`` naming ``name`` otherwise."""
    try:
        weight_map = json.loads(text)["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{name} is not a weight index (a JSON object with a weight_map): {exc}") from None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{name}: its weight_map must map tensor names to file names")
    return weight_map


def local_weights(folder: str | Path, pickled: bool = False) -> WeightSet | None:
    """The ``WeightSet`` of one format (safetensors, or pickles) in ``folder``, or None when it has none."""
    folder = Path(folder)
    names = {p.name for p in folder.iterdir() if p.is_file()}
    files, index, weight_map = loader_files(
        names, lambda n: parse_index((folder / n).read_text(encoding="utf-8"), n), pickled)
    if not files:
        return None
    return WeightSet(tuple(folder / f for f in files), index, tuple(sorted(weight_map.items())))


# --- what they hold -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One stored tensor: its shape, dtype (safetensors' name, e.g. ``F32``, or torch's), whether it is
    floating point, and the file it is in."""

    shape: tuple[int, ...]
    dtype: str
    floating: bool
    path: Path


@contextmanager
def open_safetensors(path: Path) -> Iterator[Any]:
    """``safe_open(path)`` with any failure to read it (truncated, not safetensors, gone) as a
    ``CheckpointError`` that names the file."""
    from safetensors import SafetensorError, safe_open

    try:
        handle = safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{Path(path).name} cannot be read as safetensors: {exc}") from None
    with handle:
        try:
            yield handle
        except SafetensorError as exc:
            raise CheckpointError(f"{Path(path).name} cannot be read as safetensors: {exc}") from None


def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A pickled state dict (``torch.load(weights_only=True)``, memory-mapped when its format allows);
    a ``CheckpointError`` naming the file when it is not one."""
    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:  # the legacy (pre-zip) format cannot be memory-mapped
            if "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{Path(path).name} cannot be read as a state dict: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{Path(path).name} is not a state dict of tensors")
    return state


def tensor_table(paths: Sequence[str | Path]) -> dict[str, TensorInfo]:
    """Every tensor of the files, by name; a name in two files is a ``CheckpointError`` naming both."""
    table: dict[str, TensorInfo] = {}

    def add(name: str, info: TensorInfo) -> None:
        if name in table:
            raise CheckpointError(f"tensor {name!r} is in both {table[name].path.name} and {info.path.name}")
        table[name] = info

    for path in sorted(map(Path, paths)):
        if path.suffix == ".safetensors":
            with open_safetensors(path) as f:
                for name in f.keys():
                    part = f.get_slice(name)
                    dtype = str(part.get_dtype())
                    add(name, TensorInfo(tuple(part.get_shape()), dtype, dtype.startswith(("F", "BF")), path))
        else:
            for name, t in read_pickle(path).items():
                add(name, TensorInfo(tuple(t.shape), str(t.dtype).removeprefix("torch."), t.is_floating_point(), path))
    if not table:
        raise CheckpointError(f"no tensors in {', '.join(Path(p).name for p in paths)}")
    return table


# --- do they load as shipped ----------------------------------------------------------------------


@dataclass(frozen=True)
class KeyMap:
    """How a revision's tensors load into the model: ``names`` maps every state-dict key of the model
    to the stored tensor it gets (a tied weight may share its partner's); ``params`` are the keys that
    are parameters."""

    names: Mapping[str, str]
    params: frozenset[str] = field(default_factory=frozenset)

    def stored_params(self) -> set[str]:
        """The stored tensors that become parameters (what must be floating point and finite)."""
        return {self.names[k] for k in self.params}


def ignored_unexpected(model: nn.Module) -> re.Pattern | None:
    """Stored tensors ``from_pretrained`` drops without a word, as transformers' own
    ``_adjust_missing_and_unexpected_keys`` decides them (``_keys_to_ignore_on_load_unexpected``, an
    old ``rotary_emb.inv_freq``, ``position_ids``), plus the family adapter's ``stale`` buffers
    (``metrics.hf_arch``): constants older transformers saved, never weights."""
    from metrics.hf_arch import adapter_for

    patterns = set(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    buffers = [name for name, _ in model.named_buffers()]
    if any(b.endswith("rotary_emb.inv_freq") for b in buffers):
        patterns.add(r"rotary_emb\.inv_freq")
    if any(b.endswith("position_ids") for b in buffers):
        patterns.add(r"(^|\.)position_ids$")
    patterns |= set(adapter_for(model.config.model_type).stale)
    return re.compile("|".join(f"({p})" for p in sorted(patterns))) if patterns else None


def _renamer(model: nn.Module, expected: Mapping[str, Any]) -> Callable[[str], str]:
    """The model's key for a stored tensor name, as ``convert_and_load_state_dict_in_model`` finds it."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    mapping = get_model_conversion_mapping(model, None, None)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    if len(renamings) != len(mapping):  # a WeightConverter splits or fuses tensors: no supported family has one
        raise CheckpointError(f"{type(model).__name__} converts stored tensors as it loads them: the probe "
                              "cannot check or stream such a checkpoint")
    prefix = model.base_model_prefix

    def rename(name: str) -> str:
        key, _ = rename_source_key(name, renamings, [], prefix, expected)
        if key not in expected and name in expected:
            key, _ = rename_source_key(name, [], [], prefix, expected)
        return key

    return rename


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def key_map(model: nn.Module, table: Mapping[str, TensorInfo], weights: WeightSet | None = None) -> KeyMap:
    """Check that ``table`` (``tensor_table``) loads into ``model`` (its family's model; the meta device
    is enough) as shipped, and how (see the module docstring). ``weights`` names the files in errors.

    ``CheckpointError`` in this order: two stored tensors for one key, a model key no stored tensor
    provides (missing), a stored tensor the model has no place for (unexpected), a shape other than the
    model's (mismatched), a parameter stored with a non-floating dtype.
    """
    expected = model.state_dict(keep_vars=True)
    rename = _renamer(model, expected)
    ignored = ignored_unexpected(model)
    where = weights.describe() if weights is not None else "the weight files"
    found: dict[str, str] = {}
    unexpected: list[str] = []
    for name in sorted(table):
        key = rename(name)
        if key in expected:
            if key in found:
                raise CheckpointError(f"{found[key]} ({table[found[key]].path.name}) and {name} "
                                      f"({table[name].path.name}) both load into the model's {key}")
            found[key] = name
        elif ignored is None or not (ignored.search(name) or ignored.search(key)):
            unexpected.append(name)
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})  # {target: source}
    partners: dict[str, list[str]] = {}
    for target, source in tied.items():
        partners.setdefault(target, []).append(source)
        partners.setdefault(source, []).append(target)
    names = dict(found)
    for key in expected:
        if key not in names:
            stored = [found[p] for p in partners.get(key, ()) if p in found]
            if stored:
                names[key] = stored[0]
    missing = [k for k in expected if k not in names]
    if missing:
        home = weights.home(missing[0]) if weights is not None else where
        raise CheckpointError(f"{_named(missing)} {'is' if len(missing) == 1 else 'are'} missing from {home}: "
                              "from_pretrained would initialise the model's weight at random")
    if unexpected:
        raise CheckpointError(f"{_named(unexpected)} in {table[unexpected[0]].path.name} "
                              f"{'has' if len(unexpected) == 1 else 'have'} no place in the model: "
                              "from_pretrained would drop it (not the checkpoint of this config)")
    for key, name in sorted(found.items()):
        want = tuple(expected[key].shape)
        if table[name].shape != want:
            raise CheckpointError(f"{name} in {table[name].path.name} has shape {table[name].shape}, the model's "
                                  f"config gives {want}")
    params = frozenset(n for n, _ in model.named_parameters(remove_duplicate=False) if n in names)
    for key in sorted(params):
        info = table[names[key]]
        if not info.floating:
            raise CheckpointError(f"{names[key]} in {info.path.name} is {info.dtype}: from_pretrained would cast "
                                  "it to a floating weight silently")
    return KeyMap(names, params)


def check_loading_info(info: Mapping[str, Any], model: nn.Module, weights: WeightSet) -> None:
    """A ``CheckpointError`` when ``from_pretrained(..., output_loading_info=True)`` reports a missing,
    unexpected (besides the adapter's ``stale`` buffers) or mismatched key, or an error: the whole-model
    probe's second look, after ``key_map``, at what transformers itself loaded."""
    ignored = ignored_unexpected(model)
    where = weights.describe()
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise CheckpointError(f"from_pretrained found {_named(missing)} missing from {where}")
    unexpected = sorted(k for k in info.get("unexpected_keys") or () if ignored is None or not ignored.search(k))
    if unexpected:
        raise CheckpointError(f"from_pretrained found no place for {_named(unexpected)} of {where}")
    mismatched = sorted(str(k[0]) if isinstance(k, tuple) else str(k) for k in info.get("mismatched_keys") or ())
    if mismatched:
        raise CheckpointError(f"from_pretrained found {_named(mismatched)} of {where} in another shape")
    errors = [str(e).strip().splitlines()[0] for e in info.get("error_msgs") or () if str(e).strip()]
    if errors:
        raise CheckpointError(f"from_pretrained reported loading {where}: {errors[0]}")
