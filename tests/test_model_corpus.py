"""model/corpus.py (SPEC §2): corpora, the on-disk cache, batch windows and the probe batch."""

from __future__ import annotations

import io
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CONTEXT, tiny_corpus, tiny_model_cfg, tiny_train_cfg

import model.corpus as corpus_mod
from model.corpus import (
    BatchSampler,
    Corpus,
    CorpusError,
    fixed_windows,
    load_corpus,
    probe_batch,
    stdlib_docs_text,
)
from model.stack import Member
from model.trainer import Trainer

LIMIT = 10_000  # stands in for the 40M-character WikiText limit


def wiki_text(n: int = 15_000, seed: int = 0) -> str:
    """Text with multi-byte characters throughout and symbols ('Z', 'ü') that occur only after LIMIT."""
    rng = np.random.default_rng(seed)
    head = "".join(rng.choice(list("abcdeé — .\n"), size=LIMIT))
    tail = "".join(rng.choice(list("abcZü\n"), size=n - LIMIT))
    return head + tail


@pytest.fixture
def wiki_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.setattr(corpus_mod, "WIKITEXT_CHARS", LIMIT)
    d = tmp_path / "wikitext-103-raw"
    d.mkdir()
    text = wiki_text()
    (d / "wiki.train.raw").write_text(text, encoding="utf-8")
    return d, text


# -- WikiText: limit, split, vocabulary, cache ------------------------------------------


def test_wikitext_limit_and_split(wiki_dir: tuple[Path, str], tmp_path: Path) -> None:
    d, text = wiki_dir
    c = load_corpus("wikitext103", data_dir=str(d), cache_dir=str(tmp_path / "cache"))
    used = text[:LIMIT]  # characters, not bytes: the text has multi-byte characters
    assert c.name == "wikitext103"
    assert len(c.train) == 9_000 and len(c.val) == 1_000
    assert c.train.dtype == np.uint16 and c.val.dtype == np.uint16
    assert c.decode(c.train) == used[:9_000]
    assert c.decode(c.val) == used[9_000:]
    assert c.vocab == "".join(sorted(set(used)))
    assert "Z" not in c.vocab and "ü" not in c.vocab and "é" in c.vocab
    assert c.vocab_size == len(set(used))


def test_encode_decode_round_trip() -> None:
    c = tiny_corpus()
    s = "the query attends to a sharp key."
    ids = c.encode(s)
    assert ids.dtype == np.uint16 and len(ids) == len(s)
    assert c.decode(ids) == s
    assert c.decode(torch.from_numpy(ids.astype(np.int64))) == s
    assert c.decode(ids.tolist()) == s
    assert [c.vocab[i] for i in ids] == list(s)
    with pytest.raises(CorpusError, match="'Z'"):
        c.encode("the Zebra")


def test_cache_is_reused_and_lives_under_cache_dir(wiki_dir: tuple[Path, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    d, _ = wiki_dir
    cache = tmp_path / "my-cache"
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    calls = []
    original = corpus_mod._text

    def text_once(spec: str, data_dir: str | None) -> str:
        calls.append(spec)
        if len(calls) > 1:
            raise AssertionError("the text was read again instead of the cache")
        return original(spec, data_dir)

    monkeypatch.setattr(corpus_mod, "_text", text_once)
    first = load_corpus("wikitext103", data_dir=str(d), cache_dir=str(cache))
    second = load_corpus("wikitext103", data_dir=str(d), cache_dir=str(cache))
    assert calls == ["wikitext103"]
    assert isinstance(second.train, np.memmap)
    assert second.name == first.name and second.vocab == first.vocab
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    entries = list(cache.iterdir())
    assert len(entries) == 1 and entries[0].name.startswith("wikitext103-")
    assert sorted(p.name for p in entries[0].iterdir()) == ["meta.json", "train.bin", "val.bin"]
    assert not (work / "runs").exists()  # nothing written to the default cache


def test_cache_is_keyed_by_length_and_source(wiki_dir: tuple[Path, str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    d, text = wiki_dir
    cache = str(tmp_path / "cache")
    load_corpus("wikitext103", data_dir=str(d), cache_dir=cache)
    monkeypatch.setattr(corpus_mod, "WIKITEXT_CHARS", 12_000)
    longer = load_corpus("wikitext103", data_dir=str(d), cache_dir=cache)
    assert len(longer.train) + len(longer.val) == 12_000
    assert "Z" in longer.vocab  # the slice now reaches the tail
    assert len(list(Path(cache).iterdir())) == 2
    (d / "wiki.train.raw").write_text("xyz" * 5_000, encoding="utf-8")  # the source changed
    changed = load_corpus("wikitext103", data_dir=str(d), cache_dir=cache)
    assert changed.vocab == "xyz"


def test_text_file_corpus(tmp_path: Path) -> None:
    path = tmp_path / "poems.txt"
    text = "roses are red\nviolets are blue\n" * 40
    path.write_text(text, encoding="utf-8")
    c = load_corpus(str(path), cache_dir=str(tmp_path / "cache"))
    cut = int(0.9 * len(text))
    assert c.name == "poems"
    assert c.decode(c.train) == text[:cut] and c.decode(c.val) == text[cut:]
    assert c.vocab == "".join(sorted(set(text)))


def test_stdlib_docs_spec_uses_the_embedded_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "Return the sum.\n\nA module docstring, with é." * 10
    monkeypatch.setattr(corpus_mod, "stdlib_docs_text", lambda: text)
    c = load_corpus("stdlib-docs", cache_dir=str(tmp_path / "cache"))
    assert c.name == "stdlib-docs"
    assert c.vocab == "".join(sorted(set(text)))
    assert c.decode(c.train) + c.decode(c.val) == text


# -- errors ----------------------------------------------------------------------------


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match="empty"):
        load_corpus(str(path), cache_dir=str(tmp_path / "cache"))


def test_missing_file_or_unknown_name_is_an_error(tmp_path: Path) -> None:
    for spec in (str(tmp_path / "missing.txt"), "wikitext2"):
        with pytest.raises(CorpusError, match="unknown corpus") as err:
            load_corpus(spec, cache_dir=str(tmp_path / "cache"))
        assert "wikitext103" in str(err.value) and "stdlib-docs" in str(err.value)
    assert issubclass(CorpusError, ValueError)


@pytest.mark.parametrize("exists", [False, True])
def test_missing_wikitext_directory_names_both_ways(tmp_path: Path, exists: bool) -> None:
    d = tmp_path / "wikitext"
    if exists:
        d.mkdir()  # a directory without wiki.train.raw
    with pytest.raises(CorpusError) as err:
        load_corpus("wikitext103", data_dir=str(d), cache_dir=str(tmp_path / "cache"))
    message = str(err.value)
    assert "--data-dir" in message and "wiki.train.raw" in message
    assert "datasets" in message and "hub" in message


def test_wikitext_without_data_dir_or_datasets_names_both_ways(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(CorpusError) as err:
        load_corpus("wikitext103", cache_dir=str(tmp_path / "cache"))
    message = str(err.value)
    assert "--data-dir" in message and "datasets" in message and "Salesforce/wikitext" in message


def test_too_many_symbols_for_uint16_is_an_error(tmp_path: Path) -> None:
    chars = [chr(i) for i in range(0x20, 0x20 + 72_000) if not 0xD800 <= i <= 0xDFFF]
    path = tmp_path / "symbols.txt"
    path.write_text("".join(chars), encoding="utf-8")
    with pytest.raises(CorpusError, match="uint16"):
        load_corpus(str(path), cache_dir=str(tmp_path / "cache"))


def test_file_shorter_than_one_window_is_named_by_the_path_as_typed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tiny.txt").write_text("x" * 812, encoding="utf-8")
    cache = str(tmp_path / "cache")
    expected = ("--corpus ./tiny.txt: 812 characters, too short for context 1000: its train split has 730, "
                "fewer than one window of context+1 = 1001")
    with pytest.raises(CorpusError) as err:  # checked before anything is cached
        load_corpus("./tiny.txt", cache_dir=cache, context=1000)
    assert str(err.value).startswith(expected), err.value
    load_corpus("./tiny.txt", cache_dir=cache)  # no context: no check, and the corpus is cached
    with pytest.raises(CorpusError) as err:  # from the cache: the same line
        load_corpus("./tiny.txt", cache_dir=cache, context=1000)
    assert str(err.value).startswith(expected), err.value
    with pytest.raises(CorpusError, match=r"^--corpus ./tiny.txt: 812 characters, .* its val split has 82,"):
        load_corpus("./tiny.txt", cache_dir=cache, context=100)  # the train split has 730 ≥ 101


def test_file_shorter_than_one_window_errors_in_sampler(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_text("too short.", encoding="utf-8")
    c = load_corpus(str(path), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(CorpusError, match="shorter than one window"):
        BatchSampler(c.train, batch_size=8, context=CONTEXT, seed=0)
    with pytest.raises(CorpusError, match="shorter than one window"):
        fixed_windows(c.val, 4, CONTEXT, seed=0)
    # ... and in the Trainer, whose default epoch length would be zero steps
    short = Corpus("short", c.vocab, c.train, c.val)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        Trainer(tiny_model_cfg(short.vocab_size), [Member("independent_xavier", 0, tiny_train_cfg(steps_per_epoch=None))],
                short)


def test_trainer_with_fewer_tokens_than_one_batch_errors() -> None:
    c = tiny_corpus()
    cut = Corpus("cut", c.vocab, c.train[:100], c.val)  # 100 < batch 8 × context 16
    with pytest.raises(ValueError, match=r"100 training tokens.*8×16.*steps_per_epoch"):
        Trainer(tiny_model_cfg(), [Member("independent_xavier", 0, tiny_train_cfg(steps_per_epoch=None))], cut)
    # with steps_per_epoch given, 100 tokens are enough windows of 17
    Trainer(tiny_model_cfg(), [Member("independent_xavier", 0, tiny_train_cfg(steps_per_epoch=1))], cut)


# -- batch windows -------------------------------------------------------------------------


def unique_data(n: int = 500, seed: int = 0) -> np.ndarray:
    """Distinct token values, so a window's first value tells where it starts."""
    return np.random.default_rng(seed).permutation(n).astype(np.uint16)


def test_batches_are_contiguous_windows_shifted_by_one() -> None:
    data = unique_data()
    where = np.argsort(data)
    sampler = BatchSampler(data, batch_size=8, context=CONTEXT, seed=3)
    for _ in range(5):
        x, y = sampler.next()
        assert x.shape == y.shape == (8, CONTEXT)
        assert x.dtype == y.dtype == torch.int64
        for row_x, row_y in zip(x.numpy(), y.numpy(), strict=True):
            s = where[row_x[0]]
            assert np.array_equal(row_x, data[s:s + CONTEXT])
            assert np.array_equal(row_y, data[s + 1:s + CONTEXT + 1])


def test_every_window_can_be_drawn_including_the_last() -> None:
    """NanoGPT get_batch: starts are uniform over 0 .. len − context − 1 (y may end at the last token)."""
    data = unique_data(CONTEXT + 4)
    sampler = BatchSampler(data, batch_size=64, context=CONTEXT, seed=0)
    starts = set()
    for _ in range(10):
        x, y = sampler.next()
        starts |= {int(np.argmax(data == v)) for v in x[:, 0].numpy()}
    assert starts == {0, 1, 2, 3}
    # a split of exactly one window (context + 1 tokens) is enough; one token fewer is not
    x, y = BatchSampler(data[:CONTEXT + 1], 2, CONTEXT, seed=0).next()
    assert np.array_equal(y[0].numpy(), data[1:CONTEXT + 1])
    with pytest.raises(CorpusError, match=f"{CONTEXT} tokens"):
        BatchSampler(data[:CONTEXT], 2, CONTEXT, seed=0)
    fx, fy = fixed_windows(data[:CONTEXT + 1], 2, CONTEXT, seed=0)
    assert np.array_equal(fx[1].numpy(), data[:CONTEXT]) and np.array_equal(fy[1].numpy(), data[1:CONTEXT + 1])
    with pytest.raises(CorpusError, match="shorter than one window"):
        fixed_windows(data[:CONTEXT], 2, CONTEXT, seed=0)
    seen = {int(np.argmax(data == v)) for v in fixed_windows(data, 64, CONTEXT, seed=1)[0][:, 0].numpy()}
    assert seen == {0, 1, 2, 3}


def test_batches_are_seeded() -> None:
    data = unique_data()

    def draws(seed: int) -> list[torch.Tensor]:
        s = BatchSampler(data, batch_size=4, context=CONTEXT, seed=seed)
        return [s.next()[0] for _ in range(3)]

    torch.manual_seed(0)
    a = draws(5)
    torch.manual_seed(1)  # the global RNG plays no part
    b = draws(5)
    c = draws(6)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not any(torch.equal(u, v) for u, v in zip(a, c, strict=True))
    assert not torch.equal(a[0], a[1])  # the stream advances


def test_sampler_state_round_trip_continues_the_stream() -> None:
    data = unique_data()
    first = BatchSampler(data, batch_size=4, context=CONTEXT, seed=5)
    first.next()
    first.next()
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    expected = [first.next() for _ in range(3)]
    buf.seek(0)
    resumed = BatchSampler(data, batch_size=4, context=CONTEXT, seed=99)
    resumed.load_state_dict(torch.load(buf))
    for (ex, ey), (rx, ry) in zip(expected, [resumed.next() for _ in range(3)], strict=True):
        assert torch.equal(ex, rx) and torch.equal(ey, ry)


def test_probe_batch_is_fixed_and_comes_from_validation() -> None:
    c = tiny_corpus()
    torch.manual_seed(0)
    a = probe_batch(c, 4, CONTEXT)
    torch.manual_seed(123)
    BatchSampler(c.train, 8, CONTEXT, seed=7).next()
    b = probe_batch(c, 4, CONTEXT)
    assert a.shape == (4, CONTEXT) and a.dtype == torch.int64
    assert torch.equal(a, b)
    val = c.val.astype(np.int64)
    for row in a.numpy():
        assert any(np.array_equal(row, val[s:s + CONTEXT]) for s in range(len(val) - CONTEXT + 1))
    # nothing run-specific changes it: run seed, model seed, init, batch size
    t1 = Trainer(tiny_model_cfg(), [Member("independent_xavier", 1, tiny_train_cfg(seed=1))], c)
    t2 = Trainer(tiny_model_cfg(), [Member("qk_identical", 2, tiny_train_cfg(seed=2, batch_size=4))], c)
    assert torch.equal(t1.probe_x, a) and torch.equal(t2.probe_x, a)
    assert not torch.equal(t1.samplers[0].next()[0][:4], t2.samplers[0].next()[0])  # while batches differ


# -- the embedded corpus -------------------------------------------------------------------


def test_stdlib_docs_text_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same text whichever order the directory walk yields (what ``sorted`` undoes). On one
    package of the stdlib with subpackages: a build of the whole stdlib costs ~5 s of CPU."""
    package = Path(sysconfig.get_paths()["stdlib"]) / "email"
    monkeypatch.setattr(corpus_mod.sysconfig, "get_paths", lambda *a, **k: {"stdlib": str(package)})
    first = stdlib_docs_text()
    original = Path.rglob
    walked = list(original(package, "*.py"))
    assert len(walked) > 10 and any(p.parent != package for p in walked)  # files in two levels
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: reversed(list(original(self, pattern))))
    second = stdlib_docs_text()
    assert len(first) > 10_000 and first == second


def test_stdlib_docs_text_size_and_content(stdlib_docs: str) -> None:
    """``stdlib_docs_text()``, built in a subprocess beside the other tests (tests/conftest.py)."""
    text = stdlib_docs
    assert 1_000_000 < len(text) < 3_000_000  # ~1.8M on CPython 3.11
    assert 80 <= len(set(text)) <= 200  # ~107 symbols
    assert "JSON (JavaScript Object Notation)" in text  # json's module docstring
    assert "\n\n" in text


STEPS, BATCH, LR, SEED, MODEL_SEED = 6, 8, 3e-3, 11, 5


def test_batch_sampler_windows_equal_numpy_slicing() -> None:
    data = tiny_corpus().train
    sampler = BatchSampler(data, BATCH, CONTEXT, seed=SEED)
    gen = torch.Generator().manual_seed(SEED)  # the sampler's own stream, replayed
    for _ in range(4):
        x, y = sampler.next()
        starts = torch.randint(len(data) - CONTEXT, (BATCH,), generator=gen).numpy()
        windows = np.stack([np.asarray(data[s:s + CONTEXT + 1], dtype=np.int64) for s in starts])
        assert x.dtype == torch.int64 and tuple(x.shape) == (BATCH, CONTEXT)
        np.testing.assert_array_equal(x.numpy(), windows[:, :-1])
        np.testing.assert_array_equal(y.numpy(), windows[:, 1:])


def test_fixed_windows_equal_numpy_slicing() -> None:
    data = tiny_corpus().val
    x, y = fixed_windows(data, 5, CONTEXT, seed=3)
    starts = torch.randint(len(data) - CONTEXT, (5,), generator=torch.Generator().manual_seed(3)).numpy()
    windows = np.stack([np.asarray(data[s:s + CONTEXT + 1], dtype=np.int64) for s in starts])
    np.testing.assert_array_equal(x.numpy(), windows[:, :-1])
    np.testing.assert_array_equal(y.numpy(), windows[:, 1:])
