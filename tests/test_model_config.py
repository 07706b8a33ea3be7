"""model/config.py (SPEC §1, §3): GPTConfig's and TrainConfig's checks, without torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from model.config import GPTConfig, TrainConfig

TINY = GPTConfig(vocab_size=40, n_layer=2, n_head=4, d_model=32, d_mlp=64, context=16)


@pytest.mark.parametrize("field", ["vocab_size", "n_layer", "n_head", "d_model", "d_mlp", "context"])
@pytest.mark.parametrize("value", [0, -3])
def test_config_rejects_non_positive_sizes(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"{field}.*{value}"):
        replace(TINY, **{field: value})


def test_config_rejects_non_integer_sizes() -> None:
    with pytest.raises(ValueError, match=r"d_mlp.*2\.5"):
        replace(TINY, d_mlp=2.5)


def test_config_rejects_d_model_not_divisible_by_n_head() -> None:
    with pytest.raises(ValueError, match=r"d_model=30.*n_head=4"):
        replace(TINY, d_model=30, n_head=4)
    assert replace(TINY, d_model=36, n_head=4).d_head == 9


@pytest.mark.parametrize(("change", "message"), [
    ({"epochs": 2.5}, "TrainConfig.epochs must be an integer"),
    ({"lr": "1e-3"}, "TrainConfig.lr must be a number"),
    ({"lr": 0.0}, "TrainConfig.lr must be positive"),
    ({"steps_per_epoch": 0}, "steps_per_epoch must be positive or None"),
    ({"amp": "fp8"}, "amp must be auto, off, bf16 or fp16"),
])
def test_train_config_rejects_bad_values(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**change)


def test_both_load_without_torch_and_are_what_gpt_and_recipe_export() -> None:
    """The parsers build presets from them: importing model.config must not import torch (a fresh
    interpreter; this one has torch already). model.gpt and model.recipe hand out the same classes."""
    code = "import sys, model.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"
    from model.gpt import GPTConfig as FromGPT
    from model.recipe import TrainConfig as FromRecipe

    assert (FromGPT, FromRecipe) == (GPTConfig, TrainConfig)
