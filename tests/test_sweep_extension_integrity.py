"""Checkpoint integrity: the value digest (one model in any file format, shard layout or exact dtype gets one
digest), and a revision serving another revision's weights is marked and left out of Appendix A."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest
import torch
import transformers as tf
from extension_helpers import CONFIGS

from analysis.checkpoints import compute_checkpoints, sentence
from sweep.extension import integrity
from sweep.extension.checkpoint_series import load_manifest
from sweep.extension.integrity import (
    duplicate_status,
    files_sha256,
    mark_duplicates,
    weights_sha256,
)
from sweep.extension.revision_probe import (
    ProbeSettings,
    checkpoint_rows,
    jobs_from_manifest,
    probe_revision,
)
from sweep.extension.tiny_series import build
from sweep.store import Store

TEXT = " ".join(f"def f{i}(x): return x + {i}  # add {i}" for i in range(300))


def reference_digest(state: dict[str, torch.Tensor]) -> str:
    """The canonical form written out plainly: sorted names; per tensor its name, shape and float32 values."""
    h = hashlib.sha256(b"qkgeom-weights-values-v1\0")
    for name in sorted(state):
        t = state[name]
        h.update(struct.pack("<Q", len(name)) + name.encode() + b"f4" + struct.pack("<Q", t.dim())
                 + b"".join(struct.pack("<Q", n) for n in t.shape))
        h.update(struct.pack(f"<{t.numel()}f", *t.float().reshape(-1).tolist()))
    return h.hexdigest()


def save_pickles(state: dict[str, torch.Tensor], folder: Path, shards: int = 1) -> list[Path]:
    """``state`` as ``shards`` pickled state dicts (what older hub revisions hold); aliases stay aliases."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(set(state) - {"lm_head.weight"})
    paths = []
    for i in range(shards):
        part = {n: state[n] for n in names[i::shards]}
        if "transformer.wte.weight" in part:  # a tied output embedding is an alias in its embedding's shard
            part["lm_head.weight"] = state["lm_head.weight"]
        path = folder / (f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin" if shards > 1 else "pytorch_model.bin")
        torch.save(part, path)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> tuple[tf.PreTrainedModel, Path]:
    """A tiny GPT-2 (tied embeddings) saved as one safetensors file."""
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(CONFIGS["gpt2"]())
    root = tmp_path_factory.mktemp("digest")
    model.save_pretrained(root / "single")
    return model, root


def test_one_model_in_every_format_and_shard_layout_has_one_digest(gpt2) -> None:
    model, root = gpt2
    state = model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["transformer.wte.weight"].data_ptr()  # tied
    model.save_pretrained(root / "sharded", max_shard_size="20KB")
    sharded = sorted((root / "sharded").glob("*.safetensors"))
    single = [root / "single" / "model.safetensors"]
    pickled = save_pickles(state, root / "bin")
    pickled_shards = save_pickles(state, root / "bin3", shards=3)
    assert len(sharded) > 3 and len(pickled_shards) == 3
    digest = weights_sha256(single)
    assert weights_sha256(sharded) == digest
    assert weights_sha256(pickled, allow_pickle=True) == digest
    assert weights_sha256(pickled_shards, allow_pickle=True) == digest
    # independent of the code: the canonical form written out, without the tied alias
    assert digest == reference_digest({k: v for k, v in state.items() if k != "lm_head.weight"})
    assert len({files_sha256(single), files_sha256(sharded), files_sha256(pickled)}) == 3  # bytes differ
    with pytest.raises(ValueError, match="allow_pickle"):
        weights_sha256(pickled)


def test_a_changed_tensor_name_or_shape_changes_the_digest(gpt2, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    model, root = gpt2
    base = load_file(root / "single" / "model.safetensors")
    digest = weights_sha256([root / "single" / "model.safetensors"])

    def digest_of(state: dict[str, torch.Tensor], name: str) -> str:
        save_file(state, tmp_path / f"{name}.safetensors")
        return weights_sha256([tmp_path / f"{name}.safetensors"])

    one_ulp = base["transformer.h.1.attn.c_attn.weight"].clone()
    one_ulp[3, 5] = torch.nextafter(one_ulp[3, 5], torch.tensor(1.0))
    renamed = {("transformer.h.9.ln_f.weight" if k == "transformer.ln_f.weight" else k): v for k, v in base.items()}
    reshaped = {**base, "transformer.h.0.attn.c_attn.weight":
                base["transformer.h.0.attn.c_attn.weight"].reshape(-1, 32).contiguous()}
    changed = [digest_of({**base, "transformer.h.1.attn.c_attn.weight": one_ulp}, "ulp"),
               digest_of(renamed, "renamed"), digest_of(reshaped, "reshaped"),
               digest_of({k: v for k, v in base.items() if k != "transformer.ln_f.bias"}, "dropped")]
    assert digest_of(dict(base), "same") == digest
    assert digest not in changed and len(set(changed)) == 4


def test_same_values_in_float16_and_float32_match_a_bfloat16_copy_does_not(tmp_path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(1)
    half = {"a.weight": torch.randn(8, 4).half(), "b.bias": torch.randn(4).half(),
            "c.position_ids": torch.arange(6, dtype=torch.int32)}
    full = {k: v.float() if v.is_floating_point() else v.long() for k, v in half.items()}
    save_file(half, tmp_path / "fp16.safetensors")
    save_file(full, tmp_path / "fp32.safetensors")
    save_file({k: v.to(torch.float64) if v.is_floating_point() else v for k, v in full.items()},
              tmp_path / "fp64.safetensors")
    digests = [weights_sha256([tmp_path / f"{d}.safetensors"]) for d in ("fp16", "fp32", "fp64")]
    assert len(set(digests)) == 1  # the same values, whatever dtype holds them
    torch.manual_seed(1)
    fp32 = {"a.weight": torch.randn(8, 4), "b.bias": torch.randn(4)}
    save_file(fp32, tmp_path / "orig.safetensors")
    save_file({k: v.bfloat16() for k, v in fp32.items()}, tmp_path / "bf16.safetensors")
    assert weights_sha256([tmp_path / "orig.safetensors"]) != weights_sha256([tmp_path / "bf16.safetensors"])


def test_same_bytes_in_a_hub_cache_are_not_read_again(gpt2, tmp_path, monkeypatch) -> None:
    """Branches serving one file share one blob in a hub cache: the digest is remembered by blob name."""
    model, root = gpt2
    data = (root / "single" / "model.safetensors").read_bytes()
    blob = tmp_path / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir()
    blob.write_bytes(data)
    for rev in ("a" * 40, "b" * 40):
        (tmp_path / "snapshots" / rev).mkdir(parents=True)
        (tmp_path / "snapshots" / rev / "model.safetensors").symlink_to(blob)
    first = weights_sha256([tmp_path / "snapshots" / ("a" * 40) / "model.safetensors"])

    def no_reading(paths):
        raise AssertionError(f"read {paths} again")

    monkeypatch.setattr(integrity, "_tensor_readers", no_reading)
    assert weights_sha256([tmp_path / "snapshots" / ("b" * 40) / "model.safetensors"]) == first
    shutil.copy(root / "single" / "model.safetensors", tmp_path / "copy.safetensors")
    with pytest.raises(AssertionError, match="read"):  # the same bytes elsewhere are read (and hash the same)
        weights_sha256([tmp_path / "copy.safetensors"])


def test_duplicate_status_points_at_the_latest_revision() -> None:
    revs = pd.DataFrame({"revision": ["s0", "s1", "s2", "s3"], "step": [0.0, 1.0, 2.0, 3.0],
                         "progress": [0.0, 1 / 3, 2 / 3, 1.0], "weights_sha256": ["a", "b", "b", "b"]})
    assert duplicate_status(revs) == {"s1": "duplicate_of:s3", "s2": "duplicate_of:s3"}
    assert duplicate_status(revs.assign(weights_sha256=["a", "b", "c", None])) == {}


@pytest.fixture(scope="module")
def series_with_a_copy(tmp_path_factory) -> Path:
    """The tiny series (steps 0, 5, 10) plus step20, a byte copy of step5's folder."""
    out = tmp_path_factory.mktemp("copied")
    build(out, [0, 5, 10], corpus_spec="stdlib-docs", n_layer=1)
    shutil.copytree(out / "step5", out / "step20")
    data = json.loads((out / "manifest.json").read_text())
    data["series"][0]["revisions"].append({"revision": "step20", "path": "step20", "tokens": 20 * 16 * 64})
    (out / "manifest.json").write_text(json.dumps(data))
    return out


def test_copied_revision_is_marked_and_left_out_of_appendix_a(series_with_a_copy, tmp_path) -> None:
    manifest = load_manifest(series_with_a_copy / "manifest.json", require_paths=True)
    assert [r.revision for r in manifest.series[0].revisions] == ["step0", "step5", "step10", "step20"]
    store = Store(str(tmp_path / "store"))
    settings = ProbeSettings(store.root, n_seqs=2, seq_len=16)
    for job in jobs_from_manifest(manifest):  # what each ProbeActor does, without Ray
        store.write_checkpoint(checkpoint_rows(job, probe_revision(job, TEXT, settings, torch.device("cpu"))))
    df = store.read("checkpoints")
    digests = df.groupby("revision")["weights_sha256"].first()
    assert digests["step5"] == digests["step20"] and digests.nunique() == 3
    assert digests["step0"] == weights_sha256([series_with_a_copy / "step0" / "model.safetensors"])

    name = manifest.series[0].name
    assert mark_duplicates(store, [name]) == {(name, "step5"): "duplicate_of:step20"}
    assert mark_duplicates(store, [name]) == {}  # idempotent
    df = store.read("checkpoints")
    status = df.groupby("revision")["status"].agg(set).to_dict()
    assert status == {"step0": {"ok"}, "step5": {"duplicate_of:step20"}, "step10": {"ok"}, "step20": {"ok"}}

    c = compute_checkpoints(df).result
    assert c.series[name].n_revisions == 3
    assert c.duplicate_revisions == {f"{name}@step5": "step20"}
    assert "Left out of these fits: 1 revision(s)" in sentence(c)
    assert f"{name}@step5 (= step20)" in sentence(c)


def test_a_revision_repeating_weights_as_pickles_is_a_duplicate(series_with_a_copy, tmp_path) -> None:
    """step30 serves step10's weights as two pickled shards (with --allow-pickle-weights): same value digest."""
    from safetensors.torch import load_file

    src = series_with_a_copy
    for rev in ("step0", "step10"):
        shutil.copytree(src / rev, tmp_path / rev)
    shutil.copytree(src / "step10", tmp_path / "step30", ignore=shutil.ignore_patterns("*.safetensors"))
    state = load_file(src / "step10" / "model.safetensors")
    names = sorted(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        shard = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        torch.save({n: state[n] for n in part}, tmp_path / "step30" / shard)
        weight_map.update(dict.fromkeys(part, shard))
    (tmp_path / "step30" / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    data = {"series": [{"name": "pickled", "revisions": [
        {"revision": r, "path": r, "tokens": int(r[4:]) * 1024} for r in ("step0", "step10", "step30")]}]}
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    store = Store(str(tmp_path / "store"))
    settings = ProbeSettings(store.root, n_seqs=2, seq_len=16, allow_pickle=True)
    for job in jobs_from_manifest(load_manifest(tmp_path / "manifest.json", require_paths=True)):
        store.write_checkpoint(checkpoint_rows(job, probe_revision(job, TEXT, settings, torch.device("cpu"))))
    digests = store.read("checkpoints").groupby("revision")["weights_sha256"].first()
    assert digests["step10"] == digests["step30"] != digests["step0"]
    assert mark_duplicates(store, ["pickled"]) == {("pickled", "step10"): "duplicate_of:step30"}
