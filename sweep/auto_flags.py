"""``--seeds auto``'s flags (SPEC §8): ``--max-seeds`` and ``--alpha``, and the ``AutoSeeds`` they make.

Without numpy, pandas or scipy: ``sweep.baseline``, ``sweep.interventions`` and ``sweep.demo`` add
these flags to their parsers, and ``--help`` answers before anything that trains or decides is imported. The rounds
themselves are ``sweep.sequential``'s.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from analysis.sequential_limits import FIRST_LOOK, MAX_SEEDS
from sweep.cli import UsageError


@dataclass(frozen=True)
class AutoSeeds:
    """``--seeds auto --max-seeds N --alpha A`` (checked before Ray starts)."""

    max_seeds: int = 10
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if isinstance(self.max_seeds, bool) or not isinstance(self.max_seeds, int) \
                or not FIRST_LOOK <= self.max_seeds <= MAX_SEEDS:
            raise UsageError(f"--max-seeds must be a whole number from {FIRST_LOOK} (the first round's seeds) to "
                             f"{MAX_SEEDS}, got {self.max_seeds!r}")
        if not (isinstance(self.alpha, int | float) and 0.0 < self.alpha < 0.5):
            raise UsageError(f"--alpha must be in (0, 0.5), got {self.alpha!r}")


def add_auto_flags(p: argparse.ArgumentParser) -> None:
    """``--max-seeds`` and ``--alpha``, read with ``--seeds auto``."""
    g = p.add_argument_group("--seeds auto: seeds in rounds until each claim is decided (docs/seeds.md)")
    g.add_argument("--max-seeds", type=int, default=10, help=f"most seeds per claim, {FIRST_LOOK} (the first "
                   f"round) to {MAX_SEEDS}")
    g.add_argument("--alpha", type=float, default=0.05, help="family-wise error over all the experiment's claims "
                   "and looks, in (0, 0.5)")


def auto_from_args(args: argparse.Namespace) -> AutoSeeds | None:
    """``AutoSeeds`` for ``--seeds auto`` (checked), else None; ``--max-seeds`` / ``--alpha`` without it
    are refused."""
    if args.seeds != "auto":
        for flag, value, default in (("--max-seeds", args.max_seeds, 10), ("--alpha", args.alpha, 0.05)):
            if value != default:
                raise UsageError(f"{flag} {value} is read only with --seeds auto")
        return None
    return AutoSeeds(args.max_seeds, args.alpha)
