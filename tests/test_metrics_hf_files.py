"""metrics.hf_files: the loader's weight files and the check that they load as shipped, against what
transformers' ``from_pretrained`` itself reports for the same tiny checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from safetensors.torch import load_file, save_file

from metrics.hf_arch import SUPPORTED_MODEL_TYPES, tiny_config
from metrics.hf_files import (
    CheckpointError,
    check_loading_info,
    key_map,
    loader_files,
    local_weights,
    tensor_table,
)
from metrics.hf_stream import meta_model


def saved(kind: str, folder: Path, **overrides) -> Path:
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides)).save_pretrained(folder)
    return folder


def check(folder: Path):
    weights = local_weights(folder)
    return key_map(meta_model(tf.AutoConfig.from_pretrained(folder)), tensor_table(weights.files), weights)


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
def test_every_family_as_saved_loads_as_shipped(kind: str, tmp_path: Path) -> None:
    """Every key found, each parameter a stored float tensor; transformers' renames followed (GPT-NeoX
    stores ``embed_out``, the model calls it ``lm_head``) and tied outputs share their embedding."""
    keys = check(saved(kind, tmp_path))
    model = tf.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert set(keys.names) == set(model.state_dict())
    stored = set(load_file(tmp_path / "model.safetensors"))
    assert set(keys.names.values()) == stored  # every stored tensor is used
    if kind == "gpt_neox":
        assert keys.names["lm_head.weight"] == "embed_out.weight"
    if kind == "gpt2":
        assert keys.names["lm_head.weight"] == "transformer.wte.weight"


def test_old_buffers_are_dropped_as_from_pretrained_drops_them_and_nothing_else(tmp_path: Path) -> None:
    """GPT-2's old ``attn.bias`` masks (transformers' own ignore list) and ``attn.masked_bias`` (the
    adapter's ``stale``) are no weights; an unknown tensor is, and fails the revision in both checks."""
    folder = saved("gpt2", tmp_path)
    state = load_file(folder / "model.safetensors")
    state |= {f"transformer.h.{i}.attn.bias": torch.ones(1, 1, 64, 64, dtype=torch.uint8) for i in range(2)}
    state |= {f"transformer.h.{i}.attn.masked_bias": torch.tensor(-1e4) for i in range(2)}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    check(folder)
    model, info = tf.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert info["unexpected_keys"] == {"transformer.h.0.attn.masked_bias", "transformer.h.1.attn.masked_bias"}
    check_loading_info(info, model, local_weights(folder))  # the adapter's stale buffers: dropped
    save_file({**state, "transformer.h.0.attn.rogue": torch.ones(2)}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"^transformer\.h\.0\.attn\.rogue in model\.safetensors has no place"):
        check(folder)
    model, info = tf.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    with pytest.raises(CheckpointError, match=r"from_pretrained found no place for transformer\.h\.0\.attn\.rogue"):
        check_loading_info(info, model, local_weights(folder))


def test_a_key_stored_twice_under_two_names_is_refused(tmp_path: Path) -> None:
    folder = saved("llama", tmp_path)
    state = load_file(folder / "model.safetensors")
    state["layers.0.mlp.up_proj.weight"] = state["model.layers.0.mlp.up_proj.weight"].clone()  # prefix-less copy
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"both load into the model's model\.layers\.0\.mlp\.up_proj\.weight"):
        check(folder)


def test_loader_files_follow_from_pretrained(tmp_path: Path) -> None:
    """model.safetensors first, else the index's shards; pickles the same way; a shard the index names
    and the revision lacks is named; anything else is not the model's."""
    shards = {"a": "model-1.safetensors", "b": "model-2.safetensors"}
    read = {"model.safetensors.index.json": shards, "pytorch_model.bin.index.json": {"a": "p-1.bin"}}.__getitem__
    names = {"model.safetensors", "model.safetensors.index.json", "model-1.safetensors", "model-2.safetensors"}
    assert loader_files(names, read)[0] == ("model.safetensors",)
    assert loader_files(names - {"model.safetensors"}, read)[0] == ("model-1.safetensors", "model-2.safetensors")
    assert loader_files({"consolidated.safetensors", "adapter_model.safetensors"}, read) == ((), None, {})
    assert loader_files({"pytorch_model.bin.index.json", "p-1.bin"}, read, pickled=True)[0] == ("p-1.bin",)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json puts tensors in model-2.safetensors, "
                                              "which the revision does not have"):
        loader_files({"model.safetensors.index.json", "model-1.safetensors"}, read)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CheckpointError, match="model.safetensors.index.json is not a weight index"):
        local_weights(tmp_path)
