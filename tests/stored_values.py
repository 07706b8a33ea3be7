"""Numbers stored in a file, compared with this machine's within float32 rounding (docs/architecture.md,
"Stored references").

A value that a float32 computation made on one CPU is not bit-identical on another: other kernels
(AVX2 or AVX-512 paths, another BLAS blocking, PyTorch's portable kernels under
``ATEN_CPU_CAPABILITY=default``) round differently, and training carries the difference forward. So a
stored float ``s`` and this machine's ``x`` are equal when

    |x − s| <= RTOL · scale,   scale = max(|x|, |s|, |each operand|)

where the operands are the values a derived column is computed from (``pr_q_minus_pr_k`` is a
difference of two values near 10: its rounding is that of pr_q and pr_k, not of the small
difference). Integers, strings, booleans and nulls are equal exactly; lists element by element.

``RTOL`` = 2¹¹ float32 ulps (2.4e-4). Measured on the trainer's reference run (tiny model, 2 epochs of
5 steps, every condition): one ulp of noise in every initial weight moves the reports by at most
2.3e-7 relative, PyTorch's portable kernels against this machine's AVX2 ones by 1.8e-7; another CPU
(AVX2 against the AVX-512 machine that stored the file) by 5.6e-5 — ``RTOL`` is 4× that. A real
change of the computation is far larger: a learning rate 1 % higher moves them by 7e-4
(``tests/test_model_trainer.py`` checks that such a change is caught). What must be bit-exact (two
runs on one machine, a resumed run against an uninterrupted one) is compared within one process,
never against a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: float32's machine epsilon (the spacing of floats in [1, 2)).
F32_EPS = 2.0 ** -23
#: Stored floats equal this machine's within this many float32 ulps, relative to the operands.
RTOL = 2 ** 11 * F32_EPS
#: Derived columns and the columns they are computed from: their rounding is the operands'.
OPERANDS: dict[str, tuple[str, ...]] = {"pr_q_minus_pr_k": ("pr_q", "pr_k")}


def _float(v: Any) -> bool:
    return isinstance(v, float) and not isinstance(v, bool)


def differences(mine: Any, stored: Any, rtol: float = RTOL, where: str = "",
                operands: Mapping[str, tuple[str, ...]] = OPERANDS) -> list[str]:
    """Every place where ``mine`` and ``stored`` (JSON-like: dicts, lists, numbers, strings, None)
    differ beyond float32 rounding, one line each (module docstring); [] when they agree."""
    return _walk(mine, stored, rtol, where or "$", operands, 0.0)


def _walk(a: Any, b: Any, rtol: float, where: str, operands: Mapping[str, tuple[str, ...]],
          scale: float) -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b))} on one side only"]
        out = []
        for k in a:
            s = scale
            for o in operands.get(k, ()):
                s = max(s, *(abs(v[o]) for v in (a, b) if _float(v.get(o))))
            out += _walk(a[k], b[k], rtol, f"{where}.{k}", operands, s)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} values here, {len(b)} stored"]
        return [d for i, (u, v) in enumerate(zip(a, b, strict=True))
                for d in _walk(u, v, rtol, f"{where}[{i}]", operands, scale)]
    if _float(a) and _float(b):
        if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
            same = (math.isnan(a) and math.isnan(b)) or a == b
            return [] if same else [f"{where}: {a!r} here, {b!r} stored"]
        bound = rtol * max(abs(a), abs(b), scale)
        if abs(a - b) > bound:
            return [f"{where}: {a!r} here, {b!r} stored (|Δ| {abs(a - b):.3g} > {bound:.3g})"]
        return []
    if type(a) is not type(b) or a != b:
        return [f"{where}: {a!r} here, {b!r} stored"]
    return []
