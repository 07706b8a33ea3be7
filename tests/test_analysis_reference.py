"""analysis/reference.py: the paper's reference values equal SPEC §9's table, key by key, both ways."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from analysis.reference import PAPER_REFERENCE, PAPER_VALUE

SPEC = Path(__file__).resolve().parents[1] / "docs" / "SPEC.md"


def spec_table() -> dict[str, object]:
    """SPEC §9's rows: ``PAPER_REFERENCE`` key (dotted) -> value (a Python literal in the table)."""
    text = SPEC.read_text(encoding="utf-8")
    section = text.split("## 9. Reference values", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| [^|]+ \| `([\w.]+)` \| `([^`]+)` \|$", section, re.M)
    return {key: ast.literal_eval(value) for key, value in rows}


def leaves(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(leaves(v, key) if isinstance(v, dict) else {key: v})
    return out


def test_spec_table_is_read() -> None:
    table = spec_table()
    assert len(table) >= 50 and table["alignment.final.qk_identical.mean"] == 0.4530


def test_every_reference_value_is_the_spec_tables() -> None:
    table, code = spec_table(), leaves(PAPER_REFERENCE)
    assert set(table) == set(code), f"only in SPEC: {set(table) - set(code)}; only in code: {set(code) - set(table)}"
    for key, value in code.items():
        want = table[key]
        if isinstance(value, list):
            assert list(want) == value, key
        else:
            assert want == value, key


@pytest.mark.parametrize("claim, parts", [
    ("alignment.contrast", ("alignment.final.qk_identical.mean", "alignment.final.disjoint_support_xavier.mean",
                            "alignment.final.independent_xavier.mean")),
    ("alignment.gap.growth", ("alignment.gap_by_depth.8", "alignment.gap_by_depth.4")),
    ("categories.late_mid.qk_erank", ("layer_categories.late.qk_erank", "layer_categories.mid.qk_erank")),
])
def test_the_magnitude_columns_values_derive_from_the_table(claim: str, parts: tuple[str, ...]) -> None:
    t = spec_table()
    derived = {"alignment.contrast": lambda a, b, c: a - (b + c) / 2}.get(claim, lambda a, b: a - b)
    assert PAPER_VALUE[claim] == pytest.approx(derived(*(t[p] for p in parts)), abs=1e-12)
