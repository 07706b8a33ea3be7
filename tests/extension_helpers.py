"""Tiny Hugging Face revisions for the checkpoint-extension tests (test_sweep_extension_*.py):
the probe text, four tiny architectures, a BPE tokenizer trained on the text, and a manifest
over saved revisions (the ``revisions`` fixture in conftest saves them)."""

from __future__ import annotations

import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

TEXT = " ".join(
    f"the {w} of module {i} returns a list of {v} values and raises an error when empty."
    for i, (w, v) in enumerate(zip(["name", "path", "size", "value"] * 20, ["int", "str", "float", "bytes"] * 20, strict=True))
)
N_SEQS, SEQ_LEN = 2, 16
SMALL = dict(vocab_size=100, max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
CONFIGS = {
    "gpt2": lambda: tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  scale_attn_by_inverse_layer_idx=True, bos_token_id=0, eos_token_id=0),
    "gpt_neox": lambda: tf.GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, **SMALL),
    "llama": lambda: tf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=64, **SMALL),
    "olmo": lambda: tf.OlmoConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, pad_token_id=1, **SMALL),
}
STEPS = {"gpt2": [0, 100, 1000], "gpt_neox": [0, 1000], "llama": [0, 1000], "olmo": [0, 1000]}


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
