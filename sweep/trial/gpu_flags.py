"""The GPU flags of every sweep command: ``--amp``, ``--graphs/--no-graphs``, ``--tf32/--no-tf32``.

They are ``python -m model.train``'s own (``model.flags.add_precision_flags``, one definition);
here they become ``TrialOptions`` fields (``gpu_options``), which travel in each trial's run spec
and are applied where the trial starts its trainer (``sweep.trial.trainable``). No Ray here.
"""

from __future__ import annotations

import argparse
from typing import Any

from model.flags import add_precision_flags


def add_gpu_flags(parser: argparse.ArgumentParser | Any) -> None:
    """The three flags, in a group of their own when given a parser."""
    group = parser.add_argument_group("GPU precision") if isinstance(parser, argparse.ArgumentParser) else parser
    add_precision_flags(group)


def gpu_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``TrialOptions`` fields the flags set (``amp``, ``graphs``, ``tf32``)."""
    return {"amp": args.amp, "graphs": args.graphs, "tf32": args.tf32}
