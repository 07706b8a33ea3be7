"""sweep/extension/listing.py: which of a revision's listed files a probe downloads, and the weight
files' sha256 set that finds byte copies before download. (``list_revision`` against the local Hub:
tests/test_sweep_extension_disk.py and tests/test_sweep_extension_download.py.)"""

from __future__ import annotations

from sweep.extension.listing import HubFile, Listing

GB = 10**9


def listing(commit: str, weights: dict[str, str], extra: tuple[HubFile, ...] = (), size: int = GB) -> Listing:
    """A revision listing: config, tokenizer, ``extra``, and ``weights`` ({file: sha}); several
    safetensors files are the shards of a ``model.safetensors.index.json`` (its weight_map, one tensor
    per shard, as list_revision reads it)."""
    files = [HubFile("config.json", 500, "c" * 40), HubFile("tokenizer.json", 900, "t" * 40), *extra]
    files += [HubFile(name, size, sha.ljust(64, "0"), sha.ljust(64, "0")) for name, sha in weights.items()]
    indexes = ()
    shards = [n for n in weights if n.endswith(".safetensors")]
    if len(shards) > 1:
        files.append(HubFile("model.safetensors.index.json", 300, "i" * 40))
        indexes = (("model.safetensors.index.json", tuple((f"tensor.{n}", n) for n in sorted(shards))),)
    return Listing(commit.ljust(40, "0"), tuple(files), indexes)


def test_listing_weights_fetch_and_key() -> None:
    pickled = listing("f", {"pytorch_model.bin": "f1"})
    a = listing("b", {"model-1.safetensors": "b1", "model-2.safetensors": "b2"})
    b = listing("c", {"model-2.safetensors": "b2", "model-1.safetensors": "b1"})  # the same bytes, listed apart
    c = listing("e", {"model-1.safetensors": "b1"})  # a subset: other weights
    both = listing("g", {"model.safetensors": "g1"}, extra=(HubFile("pytorch_model.bin", 9, "p" * 64, "p" * 64),
                                                             HubFile("sub/model.safetensors", 9, "q" * 64, "q" * 64)))
    assert [f.path for f in both.weights()] == ["model.safetensors"]  # top level, safetensors first
    assert [f.path for f in both.fetch()] == ["config.json", "tokenizer.json", "model.safetensors"]
    assert [f.path for f in pickled.weights()] == []
    assert [f.path for f in pickled.weights(allow_pickle=True)] == ["pytorch_model.bin"]
    assert a.weights_key() == b.weights_key() != c.weights_key()
    assert a.weight_bytes() == 2 * GB
    assert listing("g", {}).weights_key() is None  # no weights: no key
