"""sweep/extension/revision_probe.py: probe windows, jobs from a manifest, fetching a revision, and probing one (tiny local models)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from extension_helpers import N_SEQS, SEQ_LEN, TEXT, manifest_for, tiny_tokenizer

from metrics.hf_arch import tiny_config
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
    with pytest.raises(RevisionError, match=r"no weights \(\*.safetensors\)"):
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
