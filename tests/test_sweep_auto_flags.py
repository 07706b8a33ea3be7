"""sweep/auto_flags.py (SPEC §8): ``--max-seeds`` and ``--alpha`` on a parser, their checks, and the
bounds they share with ``analysis.sequential`` (the commands' own refusals: test_sweep_sequential.py)."""

from __future__ import annotations

import argparse

import pytest

from analysis import sequential
from sweep.auto_flags import AutoSeeds, add_auto_flags, auto_from_args
from sweep.cli import UsageError


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds")
    add_auto_flags(p)
    return p.parse_args(argv)


def test_the_bounds_are_the_designs():
    """--max-seeds is refused exactly where analysis.sequential.make_design would refuse it."""
    low, high = sequential.FIRST_LOOK, sequential.MAX_SEEDS
    assert (low, high) == (3, 50)
    for n in (low, high):
        assert AutoSeeds(n, 0.05).max_seeds == n
        sequential.make_design(n, 0.05, 1)
    for n in (low - 1, high + 1):
        with pytest.raises(UsageError, match=f"--max-seeds must be a whole number from {low} .* to {high}, got {n}"):
            AutoSeeds(n, 0.05)
        with pytest.raises(ValueError, match="max_seeds must be in"):
            sequential.make_design(n, 0.05, 1)


def test_flags_read_with_seeds_auto_and_refused_without():
    assert auto_from_args(parse("--seeds", "auto")) == AutoSeeds(10, 0.05)
    assert auto_from_args(parse("--seeds", "auto", "--max-seeds", "7", "--alpha", "0.1")) == AutoSeeds(7, 0.1)
    assert auto_from_args(parse("--seeds", "5")) is None
    with pytest.raises(UsageError, match="--max-seeds 7 is read only with --seeds auto"):
        auto_from_args(parse("--max-seeds", "7"))
    with pytest.raises(UsageError, match="--alpha 0.1 is read only with --seeds auto"):
        auto_from_args(parse("--seeds", "3", "--alpha", "0.1"))


@pytest.mark.parametrize("alpha", [0.0, 0.5, -0.1, True])
def test_alpha_outside_the_open_interval_is_refused(alpha):
    with pytest.raises(UsageError, match=r"--alpha must be in \(0, 0.5\)"):
        AutoSeeds(10, alpha)


def test_help_names_the_bounds(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    out = " ".join(capsys.readouterr().out.split())  # whatever the terminal width wrapped
    assert "--seeds auto: seeds in rounds until each claim is decided (docs/seeds.md)" in out
    assert "3 (the first round) to 50" in out
