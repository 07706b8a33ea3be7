"""Nothing that loads weights runs pickled code: Tune checkpoints and the checkpoint probe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.corpus import Corpus
from model.gpt import GPTConfig
from model.recipe import TrainConfig
from model.stack import Member
from model.trainer import Trainer
from sweep.extension.revision_probe import Job, ProbeSettings, RevisionError, probe_revision
from sweep.trial.trainable import CheckpointError, load_state

VOCAB = "abcdefghij "
TEXT = ("abc defg hij " * 400)[:4000]


class Planted:
    """Unpickling this calls ``Path.touch(marker)``: code chosen by whoever wrote the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def tiny_corpus() -> Corpus:
    import numpy as np

    ids = np.array([VOCAB.index(c) for c in TEXT], dtype=np.uint16)
    return Corpus("tiny", VOCAB, ids[:3600], ids[3600:])


def test_trainer_state_loads_with_weights_only(tmp_path) -> None:
    corpus = tiny_corpus()
    cfg = GPTConfig(vocab_size=len(VOCAB), n_layer=1, n_head=2, d_model=8, d_mlp=16, context=8)
    member = Member("independent_xavier", 0, TrainConfig(batch_size=2, epochs=1, steps_per_epoch=2, eval_batches=1,
                                                         probe_seqs=2, device="cpu"))
    trainer = Trainer(cfg, [member], corpus)
    trainer.run()
    torch.save(trainer.state_dict(), tmp_path / "trainer.pt")
    state = load_state(tmp_path / "trainer.pt")
    again = Trainer(cfg, [member], corpus)
    again.load_state_dict(state)
    assert again.epoch == 1 and again.statuses == ["completed"]
    assert all(torch.equal(a, b) for a, b in zip(again.model.state_dict().values(),
                                                 trainer.model.state_dict().values(), strict=True))


def test_planted_pickle_in_a_checkpoint_is_refused(tmp_path) -> None:
    marker = tmp_path / "code-ran"
    torch.save({"model": {}, "payload": Planted(marker)}, tmp_path / "trainer.pt")
    with pytest.raises(CheckpointError, match="refusing checkpoint"):
        load_state(tmp_path / "trainer.pt")
    assert not marker.exists()
    torch.load(tmp_path / "trainer.pt", weights_only=False)  # what the old loader did
    assert marker.exists()


@pytest.fixture(scope="module")
def pickled_model(tmp_path_factory) -> Path:
    """A tiny GPT-2 saved as pytorch_model.bin (a pickle; safe_serialization=False) with a character tokenizer."""
    from transformers import GPT2LMHeadModel

    from sweep.extension.tiny_series import char_tokenizer, tiny_config

    folder = tmp_path_factory.mktemp("pickled") / "step0"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_config(len(VOCAB), n_layer=1))
    model.save_pretrained(folder, safe_serialization=False)
    for safe in folder.glob("*.safetensors"):  # transformers 5 writes safetensors whatever it is told
        safe.unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    char_tokenizer(tiny_corpus()).save_pretrained(folder)
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    return folder


def test_probe_refuses_pickled_weights_unless_allowed(pickled_model, tmp_path) -> None:
    job = Job("tiny", "step0", None, str(pickled_model), 0, 0, 0.0)
    settings = ProbeSettings(str(tmp_path / "store"), n_seqs=2, seq_len=8)
    with pytest.raises(RevisionError, match="--allow-pickle-weights"):
        probe_revision(job, TEXT, settings, torch.device("cpu"))
    allowed = ProbeSettings(str(tmp_path / "store"), n_seqs=2, seq_len=8, allow_pickle=True)
    layers = probe_revision(job, TEXT, allowed, torch.device("cpu"))
    assert len(layers) == 1 and len(layers[0]["weights_sha256"]) == 64
