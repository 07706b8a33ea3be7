"""sweep.tiny_series: a tiny real character-level GPT-2 checkpoint series, built offline."""

from __future__ import annotations

from safetensors.torch import load_file
from transformers import AutoTokenizer

from model.corpus import load_corpus
from sweep.extension.checkpoint_series import load_manifest
from sweep.extension.tiny_series import SERIES_NAME, main


def test_tiny_series_builds_a_loadable_manifest_with_char_tokenizer(tmp_path) -> None:
    out = tmp_path / "tiny"
    assert main(["--out", str(out), "--steps", "0,5,10"]) == 0
    manifest = load_manifest(out / "manifest.json")
    (series,) = manifest.series
    assert series.name == SERIES_NAME
    assert [(r.revision, r.step, r.tokens) for r in series.revisions] == [
        ("step0", 0, 0), ("step5", 5, 5 * 16 * 64), ("step10", 10, 10 * 16 * 64)]
    for r in series.revisions:
        assert (out / r.revision / "model.safetensors").is_file() and r.path == str(out / r.revision)

    corpus = load_corpus("stdlib-docs")
    text = corpus.decode(corpus.val[:500])
    tok = AutoTokenizer.from_pretrained(out / "step10")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == corpus.encode(text).tolist()
    assert tok.decode(ids) == text

    first, last = load_file(out / "step0" / "model.safetensors"), load_file(out / "step10" / "model.safetensors")
    assert first.keys() == last.keys()
    assert any(not first[k].equal(last[k]) for k in first)
