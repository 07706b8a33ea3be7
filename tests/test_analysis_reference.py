"""analysis/reference.py: the paper's reference values equal SPEC's."""

from __future__ import annotations

from analysis.reference import PAPER_REFERENCE


def test_reference_values_match_spec():
    ref = PAPER_REFERENCE
    assert ref["alignment"]["final"]["qk_identical"] == {"mean": 0.4530, "sd": 0.0950}
    assert ref["alignment"]["hedges_g"] == 4.489
    assert ref["bridge"]["seed_averaged"]["key_spec__qk_compression"]["r"] == 0.840
