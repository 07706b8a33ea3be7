"""Tiny Hugging Face revisions for the checkpoint-extension tests (test_sweep_extension_*.py):
the probe text, one tiny model per supported architecture, a BPE tokenizer trained on the text, and a manifest
over saved revisions (the ``revisions`` fixture in conftest saves them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from metrics.hf_arch import SUPPORTED_MODEL_TYPES, tiny_config

TEXT = " ".join(
    f"the {w} of module {i} returns a list of {v} values and raises an error when empty."
    for i, (w, v) in enumerate(zip(["name", "path", "size", "value"] * 20, ["int", "str", "float", "bytes"] * 20, strict=True))
)
N_SEQS, SEQ_LEN = 2, 16
#: One tiny random model per supported family, from each adapter's ``tiny`` config
#: (metrics/hf_arch.py): a new family gets its test revisions without an edit here.
CONFIGS = {kind: partial(tiny_config, kind) for kind in SUPPORTED_MODEL_TYPES}
STEPS = {kind: [0, 100, 1000] if kind == "gpt2" else [0, 1000] for kind in SUPPORTED_MODEL_TYPES}


def tiny_tokenizer() -> tf.PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=100, special_tokens=["[UNK]"]))
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def manifest_for(revisions: dict[str, list[tuple[int, str]]], kinds=None, prefix: str = "tiny") -> dict:
    """Series ``{prefix}-{kind}``: tests share one store and keep apart by series name."""
    return {
        "series": [
            {"name": f"{prefix}-{kind}", "revisions": [
                {"revision": f"local-step{step}", "path": path, "tokens": step * 1024}
                for step, path in revisions[kind]]}
            for kind in kinds or revisions
        ]
    }


def save_revision(folder: Path, kind: str = "llama", shard: str | None = None, seed: int = 0,
                  edit: Callable[[dict[str, torch.Tensor]], None] | None = None, **overrides) -> tf.PreTrainedModel:
    """A tiny random model of ``kind`` saved in ``folder`` with the tiny tokenizer, as one
    ``model.safetensors`` or (``shard``, e.g. "20KB") as shards with their index; ``edit`` changes each
    weight file's tensors in place afterwards (a checkpoint as shipped wrong). Returns the model as saved."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides)).eval()
    model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    tiny_tokenizer().save_pretrained(folder)
    if edit is not None:
        for path in sorted(folder.glob("*.safetensors")):
            state = load_file(path)
            edit(state)
            save_file(state, path, metadata={"format": "pt"})
    return model


def extension_env(endpoint: str, tmp_path: Path) -> dict[str, str]:
    """This environment, pointed at the local hub (online), with no hub token and a throw-away Ray."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGING_FACE_", "TRANSFORMERS_OFFLINE", "RAY_ADDRESS"))}
    return env | {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_DISABLE_TELEMETRY": "1",
                  "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
