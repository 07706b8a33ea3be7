"""Every command answers ``--help`` and a bad flag at once: its parser imports nothing that trains.

Not named after one module: it runs each ``python -m`` command of ``bench.cli_latency.COMMANDS`` in a
fresh interpreter and lists the heavy modules (torch, Ray, scipy, pandas, ...) loaded by the time
the command had answered. No wall-clock assertion (``python -m bench.cli_latency`` prints the
times); what makes the answer slow is importing those modules, and that is what is checked.

``STILL_HEAVY`` names the commands whose parsers still import them, each with the reason; they are
not run here (each costs seconds). A command leaves that list when its parser is made light.
"""

from __future__ import annotations

import pytest

from bench.cli_latency import COMMANDS, HEAVY, answer

#: command -> why its parser still imports heavy modules
STILL_HEAVY = {
    "bench.verdicts": "its simulations use numpy, scipy and analysis.inference at module level",
}
LIGHT = [c for c in COMMANDS if c not in STILL_HEAVY]


def test_the_lists_name_every_command_once():
    assert set(STILL_HEAVY) < set(COMMANDS) and len(set(COMMANDS)) == len(COMMANDS)
    assert {"sweep.store", "sweep.browse", "sweep.extension", "sweep.report", "model.train", "sweep.baseline",
            "sweep.interventions", "sweep.demo"} <= set(LIGHT)


@pytest.mark.parametrize("module", LIGHT)
def test_help_and_a_bad_flag_import_nothing_that_trains(module):
    helped = answer(module, "--help")
    assert (helped["code"], helped["heavy"]) == (0, []), helped
    bad = answer(module, "--no-such-flag")
    assert (bad["code"], bad["heavy"]) == (2, []), bad


def test_the_probe_sees_a_heavy_import():
    """The check can fail: a command that imports torch before it parses is caught."""
    out = answer("bench.common", "--help")  # bench/common.py imports torch at the top, and has no parser
    assert "torch" in out["heavy"] and "torch" in HEAVY


def test_store_and_extension_choices_match_their_modules():
    """The two choice lists the light parsers name themselves agree with the modules that own them."""
    from sweep.extension.cli import PROBE_MODES
    from sweep.extension.revision_probe import PROBE_MODES as OWN_MODES
    from sweep.store.cli import TABLES
    from sweep.store.schema import TABLES as OWN_TABLES

    assert (TABLES, PROBE_MODES) == (OWN_TABLES, OWN_MODES)
