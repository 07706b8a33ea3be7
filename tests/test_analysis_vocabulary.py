"""analysis/vocabulary.py: the study's groups and labels are the registries' own (read here from
``QK_INITS`` and ``interventions.REGISTRY`` directly), and names no registry knows are listed."""

from __future__ import annotations

from analysis import vocabulary as vocab
from interventions import REGISTRY
from model.qk_init import QK_INITS


def test_slope_groups_split_the_registered_inits_by_coupling() -> None:
    groups = vocab.slope_groups()
    assert set(groups["coupled"]) == {n for n, r in QK_INITS.items() if r.coupled}
    assert set(groups["uncoupled"]) == {n for n, r in QK_INITS.items() if not r.coupled}
    assert set(groups["pooled"]) == set(QK_INITS)
    assert not set(groups["coupled"]) & set(groups["uncoupled"])


def test_labels_come_from_the_registry_and_unknown_names_are_listed() -> None:
    for name, regime in QK_INITS.items():
        assert vocab.init_label(name) == regime.label and vocab.init_colour(name) == regime.colour
    assert vocab.init_label("no_such_init") == "no_such_init"
    assert set(vocab.conditions()) == set(REGISTRY)
    got = vocab.unknown_names(["qk_identical", "no_such_init"], ["none", "no_such_condition"])
    assert got == {"inits": ["no_such_init"], "conditions": ["no_such_condition"]}
