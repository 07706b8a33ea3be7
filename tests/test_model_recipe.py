"""model/recipe.py's precision choices: bf16 only where the GPU has it natively, TF32 only when a
run asks for it (no side effect of resolving the AMP dtype), set so that every reader of the setting,
PyTorch's legacy ones included, still answers. CUDA is faked by its capability query (the TF32
settings are process-wide flags: writing them needs no GPU)."""

from __future__ import annotations

import pytest
import torch

from metrics.precision import full_precision
from model.recipe import native_bf16, resolve_amp, set_tf32

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")

#: every reader of the TF32 setting: PyTorch's legacy ones (Inductor's max-autotune reads them)
#: and the per-backend API
READERS = {
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "torch.backends.cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
    "torch.backends.cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    "torch.backends.cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
}
NEW_API = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


def _backend(path: str):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture
def fp32_precision():
    """The settings ``set_tf32`` writes, put back after the test: the legacy flags first (writing
    them also writes the new API), then the per-backend values."""
    legacy = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    saved = {path: _backend(path).fp32_precision for path in NEW_API}
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = legacy
    for path, value in saved.items():
        _backend(path).fp32_precision = value


def read_all() -> dict[str, object]:
    """Each reader's answer, or the error it raised."""
    out: dict[str, object] = {}
    for name, read in READERS.items():
        try:
            out[name] = read()
        except RuntimeError as exc:
            out[name] = f"raises: {str(exc).splitlines()[0][:100]}"
    return out


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


@pytest.mark.parametrize("order", [(True, False, True), (False, True, False)], ids=["on-off-on", "off-on-off"])
def test_tf32_either_way_leaves_every_older_reader_working(fp32_precision, order) -> None:
    """After ``set_tf32`` on or off, every reader answers, and answers the same thing; also after the
    probe's ``full_precision`` has set and restored the per-backend values around itself."""
    for enabled in order:
        value = "tf32" if enabled else "ieee"
        want = {"torch.backends.cuda.matmul.allow_tf32": enabled,
                "torch.get_float32_matmul_precision()": "high" if enabled else "highest",
                "torch.backends.cudnn.allow_tf32": enabled,
                "torch.backends.cuda.matmul.fp32_precision": value,
                "torch.backends.cudnn.conv.fp32_precision": value,
                "torch.backends.cudnn.rnn.fp32_precision": value}
        set_tf32(enabled, CUDA)
        assert read_all() == want, f"set_tf32({enabled})"
        with full_precision("cpu"):
            pass
        assert read_all() == want, f"set_tf32({enabled}), then a probe"


def test_compile_under_the_portable_kernels_emits_scalar_cpp(monkeypatch) -> None:
    """With ATEN_CPU_CAPABILITY=default, inductor's C++ vectorized for this CPU does not compile (torch
    2.13: "'at::vec' has not been declared"); compile_model asks it for scalar code then, and only then."""
    import torch._inductor.config as inductor

    from model.recipe import compile_model

    monkeypatch.setattr(inductor.cpp, "simdlen", None)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    compile_model(torch.nn.Linear(2, 2))
    assert inductor.cpp.simdlen is None
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    compile_model(torch.nn.Linear(2, 2))
    assert inductor.cpp.simdlen == 1
