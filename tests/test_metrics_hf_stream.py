"""metrics.hf_stream: the layer-streamed probe against the whole-model probe, family by family.

Each supported family's tiny random model (perturbed, so norms and biases are not trivial;
settings that give the rotary, scaling and clipping paths teeth) is saved as sharded
safetensors and probed both ways: the rows must agree within 1e-6 (relative), while the
streamed pass never holds more than one decoder block's real parameters.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
import transformers as tf
from safetensors.torch import load_file, save_file

from metrics.hf_arch import SUPPORTED_MODEL_TYPES, adapter_for, tiny_config
from metrics.hf_files import CheckpointError
from metrics.hf_probe import probe_hf_model
from metrics.hf_stream import WeightFiles, meta_model, probe_memory, probe_streamed, streaming

OVERRIDES = {
    "gpt2": {"scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True},
    "gpt_neox": {"rotary_pct": 0.5},
    "olmo": {"clip_qkv": 1.0},
    "phi3": {"partial_rotary_factor": 0.5},
}
CONFIGS = {kind: partial(tiny_config, kind, **OVERRIDES.get(kind, {})) for kind in SUPPORTED_MODEL_TYPES}
B, T = 3, 16


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 100, (B, T), generator=torch.Generator().manual_seed(1))


def saved_model(kind: str, folder: Path, seed: int = 0) -> tf.PreTrainedModel:
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(CONFIGS[kind]()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(folder, max_shard_size="30KB")  # several shards, a block split across files
    assert len(list(folder.glob("*.safetensors"))) > 2
    return model


def assert_rows_close(streamed: list[dict], whole: list[dict], rel: float = 1e-6) -> None:
    assert [r["layer"] for r in streamed] == [r["layer"] for r in whole]
    for s, w in zip(streamed, whole, strict=True):
        assert s.keys() == w.keys() and s["dtype"] == w["dtype"] == "float32"
        for key in w:
            if key not in ("layer", "dtype"):
                assert s[key] == pytest.approx(w[key], rel=rel, abs=1e-9), (key, s["layer"])


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
def test_streamed_rows_equal_whole_model_rows(kind: str, ids: torch.Tensor, tmp_path: Path) -> None:
    model = saved_model(kind, tmp_path)
    assert_rows_close(probe_streamed(tmp_path, ids), probe_hf_model(model, ids))


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox", "gemma"])
def test_one_block_is_real_at_a_time(kind: str, ids: torch.Tensor, tmp_path: Path) -> None:
    """When each block runs it is the only block with real parameters; none is left after, and the
    embedding table holds only the batch's distinct tokens."""
    saved_model(kind, tmp_path)
    config = tf.AutoConfig.from_pretrained(tmp_path)
    model = meta_model(config)
    blocks = adapter_for(kind).layers(model)
    seen: list[list[bool]] = []
    for block in blocks:  # the attention runs inside its block, after the block's weights were read
        getattr(block, adapter_for(kind).attention).register_forward_pre_hook(
            lambda m, a: seen.append([any(not p.is_meta for p in b.parameters()) for b in blocks]))
    with streaming(model, WeightFiles(sorted(tmp_path.glob("*.safetensors"))), ids) as run:
        assert model.get_input_embeddings().weight.shape[0] == len(torch.unique(ids)) < config.vocab_size
        run()
    assert seen == [[i == j for j in range(len(blocks))] for i in range(len(blocks))]
    assert all(p.is_meta for p in model.parameters())


def test_a_base_model_checkpoint_with_extra_tensors_loads_and_a_missing_one_is_named(
        ids: torch.Tensor, tmp_path: Path) -> None:
    """Names without the base model's prefix (saved from GPT2Model) and tensors the model lacks (old
    GPT-2's ``attn.bias`` masks) are read as from_pretrained reads them; a missing weight is named."""
    model = saved_model("gpt2", tmp_path / "full")
    state = {}
    for shard in (tmp_path / "full").glob("*.safetensors"):
        state |= load_file(shard)
    bare = {k.removeprefix("transformer."): v for k, v in state.items()}
    bare |= {f"h.{i}.attn.bias": torch.ones(1, 1, 64, 64) for i in range(2)}
    folder = tmp_path / "bare"
    folder.mkdir()
    save_file(bare, folder / "model.safetensors")
    (folder / "config.json").write_text((tmp_path / "full" / "config.json").read_text())
    assert_rows_close(probe_streamed(folder, ids), probe_hf_model(model, ids))
    del bare["h.1.mlp.c_fc.weight"]
    save_file(bare, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"^transformer\.h\.1\.mlp\.c_fc\.weight is missing from "
                                              r"model\.safetensors: from_pretrained would initialise"):
        probe_streamed(folder, ids)


def test_an_unsupported_family_is_refused_before_any_weight_is_read(ids: torch.Tensor, tmp_path: Path) -> None:
    saved_model("llama", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    for shard in tmp_path.glob("*.safetensors"):
        shard.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="'bert' is not supported"):
        probe_streamed(tmp_path, ids)


def test_probe_memory_counts_parameters_and_blocks() -> None:
    """Counts equal the real model's; the streamed estimate is below the whole one once blocks are many."""
    config = CONFIGS["gpt_neox"](num_hidden_layers=8)
    real = tf.AutoModelForCausalLM.from_config(config)
    mem = probe_memory(config, n_seqs=2, seq_len=16)
    assert mem.params == sum(p.numel() for p in real.parameters())
    assert mem.block == sum(p.numel() for p in real.gpt_neox.layers[0].parameters())
    assert mem.whole > 4 * mem.params > mem.streamed > 4 * mem.block
