"""metrics/precision.py: the probe's float32 matmuls never use TF32, whatever training set (SPEC §4.1).

Shown on the CPU: the process turns TF32 on the way training does (PyTorch's per-backend
``fp32_precision`` API, or the legacy flag), and the settings seen inside the probe's forward
pass and its reductions are "ieee"; afterwards the process's own are back.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from helpers import CONTEXT, random_tokens
from probe_pack_helpers import random_model, stacked_gpt

import metrics.attention
from metrics.precision import SETTINGS, full_precision, precisions, set_precisions
from metrics.probe import probe_layers, probe_members

IEEE = dict.fromkeys(SETTINGS, "ieee")


@pytest.fixture
def process_settings() -> Iterator[None]:
    """Leave torch's precision settings, legacy and per-backend, as they were before the test."""
    legacy = torch.get_float32_matmul_precision()
    saved = precisions()
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(legacy)  # first: it also writes cuda/mkldnn matmul
        set_precisions(saved)


def seen_inside_the_probe(model, idx, monkeypatch, probe=probe_layers) -> list[dict[str, str]]:
    """The settings each layer's forward pass and the attention reduction ran under."""
    seen: list[dict[str, str]] = []
    real = metrics.attention.batched_attention_stats
    monkeypatch.setattr(metrics.attention, "batched_attention_stats", lambda s: seen.append(precisions()) or real(s))
    handles = [b.attn.register_forward_hook(lambda *_: seen.append(precisions())) for b in model.blocks]
    try:
        probe(model, idx)
    finally:
        for h in handles:
            h.remove()
    assert len(seen) == model.cfg.n_layer + 1
    return seen


def training_turns_tf32_on() -> dict[str, str]:
    """What a trainer on CUDA sets (the current API), plus oneDNN's reduced-precision matmuls."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    return precisions()


@pytest.mark.parametrize("pack", [False, True])
def test_the_probe_runs_in_ieee_precision_when_training_turned_tf32_on(process_settings, monkeypatch,
                                                                       pack: bool) -> None:
    model = random_model(1, n_layer=2)
    idx = random_tokens(2, CONTEXT, model.cfg.vocab_size)
    before = probe_layers(model, idx)
    if pack:
        model = stacked_gpt([model, random_model(2, n_layer=2)])
    on = training_turns_tf32_on()
    assert on["cuda.matmul"] == "tf32" and on["mkldnn.matmul"] == "bf16"
    seen = seen_inside_the_probe(model, idx, monkeypatch, probe_members)
    assert seen == [IEEE] * len(seen)
    assert precisions() == on  # the process's own settings are back
    if not pack:  # and the values are those of a process that never asked for TF32 (the CPU ignores it)
        assert probe_layers(model, idx) == before


def test_the_legacy_flag_is_overridden_and_left_consistent(process_settings, monkeypatch) -> None:
    """Today's trainer sets the legacy flag; inside the probe the per-backend setting wins, and
    afterwards the legacy and new readers agree again (a mixed state would make the legacy
    readers raise, pytorch#166387)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    model = random_model(2)
    seen = seen_inside_the_probe(model, random_tokens(2, CONTEXT, model.cfg.vocab_size), monkeypatch)
    assert all(s["cuda.matmul"] == "ieee" for s in seen)
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_the_settings_come_back_after_an_error(process_settings) -> None:
    on = training_turns_tf32_on()
    model = random_model(0)
    with pytest.raises(ValueError, match="exceeds context"):
        probe_layers(model, torch.zeros(1, CONTEXT + 1, dtype=torch.int64))
    assert precisions() == on
    with pytest.raises(RuntimeError, match="boom"), full_precision("cpu"):
        assert precisions() == IEEE and not torch.is_autocast_enabled("cpu")
        raise RuntimeError("boom")
    assert precisions() == on


def test_autocast_is_off_inside_the_probe(monkeypatch) -> None:
    """A probe called under the trainer's autocast still computes in float32."""
    model = random_model(3)
    idx = random_tokens(2, CONTEXT, model.cfg.vocab_size)
    dtypes = []
    handle = model.blocks[0].attn.q_proj.register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            rows = probe_layers(model, idx)
    finally:
        handle.remove()
    assert dtypes == [torch.float32]
    assert rows == probe_layers(model, idx)


def test_torch_precision_api_as_the_trainer_relies_on_it(process_settings) -> None:
    """torch 2.13's per-backend API and its legacy readers (what docs/SPEC.md §4.1 describes):
    set_float32_matmul_precision("high") also writes cuda and oneDNN matmul to "tf32"; the new
    API alone leaves the legacy reader behind, which then raises rather than answer."""
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # cuDNN's default
    torch.set_float32_matmul_precision("high")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32" == torch.backends.mkldnn.matmul.fp32_precision
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()
    with full_precision():
        assert torch.get_float32_matmul_precision() == "highest"  # "ieee" is the legacy "highest"
