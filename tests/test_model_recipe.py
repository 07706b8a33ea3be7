"""model/recipe.py's precision choices: bf16 only where the GPU has it natively, TF32 only when a
run asks for it (no side effect of resolving the AMP dtype). CUDA is faked by its capability query."""

from __future__ import annotations

import pytest
import torch

from model.recipe import native_bf16, resolve_amp, set_tf32

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


@pytest.fixture
def fp32_precision():
    """The two settings ``set_tf32`` writes, put back after the test."""
    saved = torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    yield
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = saved


@pytest.mark.parametrize(("capability", "gpu", "auto"), [((7, 0), "V100", torch.float16),
                                                          ((7, 5), "T4", torch.float16),
                                                          ((8, 0), "A100", torch.bfloat16),
                                                          ((9, 0), "H100", torch.bfloat16)])
def test_auto_is_bf16_only_where_native(monkeypatch, fp32_precision, capability, gpu, auto) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    # emulation counts for is_bf16_supported()'s default: it must not decide
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert native_bf16(CUDA) == (auto == torch.bfloat16), gpu
    assert resolve_amp("auto", CUDA) == auto, gpu
    assert resolve_amp("bf16", CUDA) == torch.bfloat16 and resolve_amp("fp16", CUDA) == torch.float16
    assert resolve_amp("off", CUDA) is None
    assert resolve_amp("auto", CPU) is None and resolve_amp("fp16", CPU) is None
    # resolving is free of side effects: TF32 stays as it was
    assert torch.backends.cuda.matmul.fp32_precision == "ieee" == torch.backends.cudnn.conv.fp32_precision


def test_tf32_is_set_only_when_asked_and_only_for_cuda(fp32_precision) -> None:
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    set_tf32(True, CPU)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    set_tf32(True, CUDA)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32" == torch.backends.cudnn.conv.fp32_precision
    set_tf32(False, CUDA)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee" == torch.backends.cudnn.conv.fp32_precision
