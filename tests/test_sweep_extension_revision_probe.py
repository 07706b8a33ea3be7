"""sweep/extension/revision_probe.py: probe windows, jobs from a manifest, fetching a revision, and probing one (tiny local models)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from extension_helpers import N_SEQS, SEQ_LEN, TEXT, manifest_for, save_revision, tiny_tokenizer

from metrics.hf_arch import tiny_config
from metrics.hf_files import CheckpointError
from sweep.extension.checkpoint_series import parse_manifest
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    RevisionError,
    check_revision,
    fetch_revision,
    has_tokenizer_files,
    jobs_from_manifest,
    probe_revision,
    probe_windows,
    resolve_snapshot,
)


def test_probe_windows_fixed_shape_and_positions() -> None:
    tok = tiny_tokenizer()
    ids = probe_windows(tok, TEXT, 3, SEQ_LEN)
    assert ids.shape == (3, SEQ_LEN) and ids.dtype == torch.long
    assert torch.equal(ids, probe_windows(tok, TEXT, 3, SEQ_LEN))  # the same text every time
    assert ids[0].tolist() == tok(TEXT[:200], add_special_tokens=False)["input_ids"][:SEQ_LEN]
    with pytest.raises(ValueError, match="too short"):
        probe_windows(tok, TEXT[:50], 2, SEQ_LEN)


def test_progress_is_scaled_within_each_series(revisions) -> None:
    jobs = jobs_from_manifest(parse_manifest(manifest_for(revisions, ["gpt2"])))
    assert [(j.step, j.tokens, j.progress) for j in jobs] == [
        (0, 0, 0.0), (100, 102400, 0.1), (1000, 1024000, 1.0)]
    no_tokens = parse_manifest({"series": [{"name": "s", "revisions": [
        {"revision": "step-10", "repo": "a/b"}, {"revision": "step-40", "repo": "a/b"}]}]})
    assert [j.progress for j in jobs_from_manifest(no_tokens)] == [0.25, 1.0]
    endpoint = parse_manifest({"series": [{"name": "o", "revisions": [{"revision": "main", "repo": "a/b"}]}]})
    assert jobs_from_manifest(endpoint)[0].progress == 1.0


def test_fetch_revision_files_and_errors(monkeypatch, tmp_path) -> None:
    """One listing (model_info with files_metadata), then config.json alone, checked, then the rest by
    commit; pickles left out while safetensors exist; a missing revision fails at once, a flaky hub
    is tried ``HUB_TRIES`` times."""
    import huggingface_hub
    from huggingface_hub.errors import RevisionNotFoundError
    from huggingface_hub.hf_api import BlobLfsInfo, RepoSibling

    commit = "c" * 40
    siblings = [RepoSibling("config.json", 30, "1" * 40), RepoSibling("tokenizer.json", 10, "2" * 40),
                RepoSibling("model.safetensors", 100, "3" * 40, BlobLfsInfo(100, "a" * 64, 134)),
                RepoSibling("pytorch_model.bin", 100, "4" * 40, BlobLfsInfo(100, "b" * 64, 134))]
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo, revision, files_metadata: (
        SimpleNamespace(sha=commit, siblings=siblings)))
    calls = []

    def download(repo, name, revision, cache_dir):
        calls.append((repo, name, revision, cache_dir))
        path = tmp_path / "snap" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text('{"model_type": "llama"}' if name == "config.json" else "x")
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert fetch_revision("a/b", "step1", "/cache") == str(tmp_path / "snap")
    assert calls[0] == ("a/b", "config.json", commit, "/cache")  # alone first, checked, then the rest
    assert sorted(c[1] for c in calls[1:]) == ["model.safetensors", "tokenizer.json"]  # no pickle

    def missing(self, repo, revision, files_metadata):
        import httpx2

        raise RevisionNotFoundError("404", response=httpx2.Response(404, request=httpx2.Request("GET", "http://h/x")))

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", missing)
    with pytest.raises(RevisionError, match="revision 'step9' does not exist in a/b"):
        fetch_revision("a/b", "step9", None)

    tries = []
    def flaky(self, repo, revision, files_metadata):
        tries.append(1)
        raise ConnectionError("reset")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", flaky)
    monkeypatch.setattr("sweep.extension.hub.time.sleep", lambda s: None)
    with pytest.raises(RevisionError, match="could not list a/b@step1: ConnectionError: reset"):
        fetch_revision("a/b", "step1", None)
    assert len(tries) == 3


# --- cheap checks before any weight is read --------------------------------------------------


def _job(path, revision: str = "local-step0", repo: str | None = None) -> Job:
    return Job("cheap", revision, repo, str(path), 0, 0, 0.0)


def _settings(tmp_path) -> ProbeSettings:
    return ProbeSettings(str(tmp_path / "store"), n_seqs=N_SEQS, seq_len=SEQ_LEN)


def test_unsupported_type_is_refused_from_config_json_before_the_weights(tmp_path) -> None:
    """A gemma2 config.json next to garbage weights and no tokenizer: the error is the type, naming
    what is supported; the garbage is never opened (hashing or loading it would fail differently)."""
    folder = tmp_path / "gemma2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma2", "hidden_size": 32}))
    (folder / "model.safetensors").write_bytes(b"\x00garbage, not safetensors" * 10)
    with pytest.raises(RevisionError, match=r"model_type 'gemma2' is not supported.*supported: gpt2, "
                                           r"gpt_neox, llama, olmo, qwen2, mistral, gemma, phi3, olmo2"):
        probe_revision(_job(folder), TEXT, _settings(tmp_path), torch.device("cpu"))
    # the same folder with a supported type reaches the weights and fails there instead
    (folder / "config.json").write_text(tiny_config("llama").to_json_string())
    tiny_tokenizer().save_pretrained(folder)
    with pytest.raises(Exception) as caught:
        probe_revision(_job(folder), TEXT, _settings(tmp_path), torch.device("cpu"))
    assert "not supported" not in str(caught.value)


def test_missing_tokenizer_files_are_named_before_loading(revisions, tmp_path) -> None:
    """A revision folder with weights and config but no tokenizer: named at once, no model loaded."""
    src = Path(revisions["qwen2"][0][1])
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(src / name, folder / name)
    loaded = []
    import transformers

    original = transformers.AutoModelForCausalLM.from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **k: loaded.append(a) or original(*a, **k)
    try:
        with pytest.raises(RevisionError, match=r"no tokenizer files in .*no-tokenizer \(need one of: "
                                                r"tokenizer.json, tokenizer.model, vocab.json \+ merges.txt"):
            probe_revision(_job(folder), TEXT, _settings(tmp_path), torch.device("cpu"))
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = original
    assert not loaded
    assert not has_tokenizer_files(str(folder)) and has_tokenizer_files(str(src))


def test_missing_weights_and_config_are_named(revisions, tmp_path) -> None:
    src = Path(revisions["llama"][0][1])
    folder = tmp_path / "no-weights"
    shutil.copytree(src, folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(RevisionError, match=r"no weights \(model.safetensors or model.safetensors.index.json\)"):
        check_revision(str(folder), _job(folder), _settings(tmp_path))
    (folder / "config.json").unlink()
    with pytest.raises(RevisionError, match="no config.json in"):
        check_revision(str(folder), _job(folder), _settings(tmp_path))


def test_hub_cache_root_resolves_to_its_snapshot(revisions, tmp_path) -> None:
    """models--org--name/{refs/main, snapshots/<hash>/, blobs/}: the snapshot is probed; with two
    snapshots the one refs/<revision> names is used, and without such a ref the error lists them."""
    src = Path(revisions["mistral"][1][1])
    root = tmp_path / "models--org--tiny"
    (root / "blobs").mkdir(parents=True)
    shutil.copytree(src, root / "snapshots" / "a1b2c3")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("a1b2c3")
    assert resolve_snapshot(str(root), "local-step1000") == str(root / "snapshots" / "a1b2c3")
    layers = probe_revision(_job(root, "local-step1000"), TEXT, _settings(tmp_path), torch.device("cpu"))
    direct = probe_revision(_job(src, "local-step1000"), TEXT, _settings(tmp_path), torch.device("cpu"))
    assert [r["pr_k"] for r in layers] == [r["pr_k"] for r in direct]

    shutil.copytree(src, root / "snapshots" / "d4e5f6")
    assert resolve_snapshot(str(root), "main") == str(root / "snapshots" / "a1b2c3")
    with pytest.raises(RevisionError, match=r"hub-cache root with 2 snapshots \(a1b2c3, d4e5f6\) and no "
                                            r"refs/step9: give one .*snapshots/<hash> folder"):
        resolve_snapshot(str(root), "step9")
    assert resolve_snapshot(str(src), "x") == str(src)  # an ordinary folder is itself


# --- revisions that do not load as shipped: a failure naming the tensor and its file, in both modes ----

K1 = "model.layers.1.self_attn.k_proj.weight"
MODES = ("whole", "streamed")


def _probe(folder: Path, mode: str, tmp_path: Path, **settings) -> list[dict]:
    job = Job("broken", "local-step0", None, str(folder), 0, 0, 0.0, mode=mode)
    return probe_revision(job, TEXT, ProbeSettings(str(tmp_path / "store"), n_seqs=N_SEQS, seq_len=SEQ_LEN,
                                                   **settings), torch.device("cpu"))


def _drop(name: str):
    return lambda state: state.pop(name, None)


@pytest.mark.parametrize("mode", MODES)
def test_a_missing_weight_fails_the_revision_single_file_and_sharded(mode: str, tmp_path: Path) -> None:
    """from_pretrained would initialise the missing k_proj at random (an ``ok`` row whose pr_k changes
    from run to run): the revision fails, naming the tensor and the file it should be in."""
    save_revision(tmp_path / "single", edit=_drop(K1))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(K1)} is missing from model\.safetensors: "
                                              "from_pretrained would initialise"):
        _probe(tmp_path / "single", mode, tmp_path)
    save_revision(tmp_path / "sharded", shard="20KB", edit=_drop(K1))
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) > 2
    with pytest.raises(CheckpointError, match=rf"^{re.escape(K1)} is missing from {re.escape(index[K1])}: "):
        _probe(tmp_path / "sharded", mode, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_an_integer_weight_fails_the_revision(mode: str, tmp_path: Path) -> None:
    """An int32 k_proj would be cast to float silently (pr_q moved 16.50 -> 17.08 in the review)."""

    def to_int(state: dict) -> None:
        state[K1] = (state[K1] * 100).to(torch.int32)

    save_revision(tmp_path / "int", edit=to_int)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(K1)} in model\.safetensors is I32: from_pretrained "
                                              "would cast it"):
        _probe(tmp_path / "int", mode, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_a_non_finite_weight_fails_while_it_is_hashed(mode: str, tmp_path: Path) -> None:
    def nan(state: dict) -> None:
        if K1 in state:
            state[K1][0, 0] = float("nan")
            state[K1][1, 1] = float("inf")

    save_revision(tmp_path / "nan", shard="20KB", edit=nan)
    shard = json.loads((tmp_path / "nan" / "model.safetensors.index.json").read_text())["weight_map"][K1]
    with pytest.raises(CheckpointError, match=rf"^{re.escape(K1)} in {re.escape(shard)} holds 2 non-finite values "
                                              r"\(NaN or infinity\)"):
        _probe(tmp_path / "nan", mode, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_an_unexpected_or_mismatched_tensor_fails_the_revision(mode: str, tmp_path: Path) -> None:
    save_revision(tmp_path / "extra", edit=lambda s: s.update({"model.layers.0.mlp.gate_proj.bias": torch.zeros(64)}))
    with pytest.raises(CheckpointError, match=r"^model\.layers\.0\.mlp\.gate_proj\.bias in model\.safetensors has "
                                              "no place in the model"):
        _probe(tmp_path / "extra", mode, tmp_path)
    save_revision(tmp_path / "shape", edit=lambda s: s.update({K1: s[K1][:8].clone()}))
    with pytest.raises(CheckpointError, match=rf"^{re.escape(K1)} in model\.safetensors has shape \(8, 32\), the "
                                              r"model's config gives \(16, 32\)"):
        _probe(tmp_path / "shape", mode, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_tied_embeddings_stored_under_either_name_probe_alike(mode: str, tmp_path: Path) -> None:
    """A tied input/output embedding stored once, as the input embedding (transformers' way) or as
    ``lm_head.weight`` (some converters' way), in one file or in shards: both load, in both modes, to
    the same rows."""

    def as_lm_head(state: dict) -> None:
        if "model.embed_tokens.weight" in state:
            state["lm_head.weight"] = state.pop("model.embed_tokens.weight")

    from safetensors import safe_open

    for layout in (None, "20KB"):  # one file, and shards with their index
        embed, head = tmp_path / f"embed-{layout}", tmp_path / f"head-{layout}"
        save_revision(embed, tie_word_embeddings=True, shard=layout)
        save_revision(head, tie_word_embeddings=True, shard=layout, edit=as_lm_head)
        stored = set()
        for path in head.glob("*.safetensors"):
            with safe_open(str(path), "pt") as f:
                stored |= set(f.keys())
        assert "lm_head.weight" in stored and "model.embed_tokens.weight" not in stored
        a, b = _probe(embed, mode, tmp_path), _probe(head, mode, tmp_path)
        assert [r["pr_k"] for r in a] == [r["pr_k"] for r in b]
        assert [r["attn_entropy"] for r in a] == [r["attn_entropy"] for r in b]


@pytest.mark.parametrize("mode", MODES)
def test_the_files_are_the_loaders_not_a_glob(mode: str, tmp_path: Path) -> None:
    """model.safetensors beside shards and their index: from_pretrained loads model.safetensors, and so
    does the probe (no "tensor ... in both"); a stray adapter or consolidated.safetensors is never read
    and leaves the value digest as it is."""
    from safetensors.torch import save_file

    save_revision(tmp_path / "single")
    plain = _probe(tmp_path / "single", mode, tmp_path)
    both = tmp_path / "both"
    save_revision(both, shard="20KB", seed=1)  # other weights in the shards: what is probed shows which
    shutil.copy(tmp_path / "single" / "model.safetensors", both / "model.safetensors")
    save_file({"base_model.model.lora_A.weight": torch.ones(2, 2)}, both / "adapter_model.safetensors")
    save_file({"layers.0.attention.wq.weight": torch.ones(3, 3)}, both / "consolidated.safetensors")
    rows = _probe(both, mode, tmp_path)
    from sweep.extension.revision_probe import weight_set

    assert [r["pr_k"] for r in rows] == [r["pr_k"] for r in plain]
    assert rows[0]["weights_sha256"] == plain[0]["weights_sha256"]
    assert weight_set(str(both)).files == (both / "model.safetensors",)


@pytest.mark.parametrize("mode", MODES)
def test_token_ids_beyond_the_vocabulary_are_refused_before_the_forward_pass(mode: str, tmp_path: Path) -> None:
    """A tokenizer of 100 tokens before a model of 60 rows: refused in one line naming both, not an
    IndexError from inside the embedding (whole mode) or a bounds error (streamed)."""
    save_revision(tmp_path / "small", vocab_size=60)
    with pytest.raises(RevisionError, match=r"^the tokenizer gives token id \d+ \('.*'\), beyond the 60 rows of the "
                                            r"input embedding model\.embed_tokens\.weight in model\.safetensors"):
        _probe(tmp_path / "small", mode, tmp_path)


def test_a_truncated_weight_file_is_named(tmp_path: Path) -> None:
    save_revision(tmp_path / "cut", shard="20KB")
    shard = sorted((tmp_path / "cut").glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"^{re.escape(shard.name)} cannot be read as safetensors: "):
        _probe(tmp_path / "cut", "whole", tmp_path)
