"""sweep/extension/revision_probe.py: probe windows, jobs from a manifest, fetching a revision, and probing one (tiny local models)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from extension_helpers import SEQ_LEN, TEXT, manifest_for, tiny_tokenizer

from sweep.extension.checkpoint_series import parse_manifest
from sweep.extension.revision_probe import (
    RevisionError,
    fetch_revision,
    jobs_from_manifest,
    probe_windows,
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


def test_fetch_revision_files_and_errors(monkeypatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import RevisionNotFoundError

    calls = []
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files",
                        lambda self, repo, revision: ["config.json", "model.safetensors", "pytorch_model.bin"])
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo, **kw: calls.append((repo, kw)) or "/cache/snap")
    assert fetch_revision("a/b", "step1", "/cache") == "/cache/snap"
    repo, kw = calls[0]
    assert (repo, kw["revision"], kw["cache_dir"]) == ("a/b", "step1", "/cache")
    assert "*.safetensors" in kw["allow_patterns"] and "*.bin" not in kw["allow_patterns"]

    def missing(self, repo, revision):
        raise RevisionNotFoundError("404", response=SimpleNamespace(headers={}, request=None))

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", missing)
    with pytest.raises(RevisionError, match="revision 'step9' does not exist in a/b"):
        fetch_revision("a/b", "step9", None)

    tries = []
    def flaky(self, repo, revision):
        tries.append(1)
        raise ConnectionError("reset")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", flaky)
    monkeypatch.setattr("sweep.extension.revision_probe.time.sleep", lambda s: None)
    with pytest.raises(RevisionError, match="after 3 tries: reset"):
        fetch_revision("a/b", "step1", None, retries=3)
    assert len(tries) == 3
