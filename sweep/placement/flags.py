"""The placement flags of every sweep command: ``--pack M`` (how many runs of one shape share a trial)
and ``--dry-run`` (the plan printed, nothing trained). Without pandas or Ray: a parser imports them."""

from __future__ import annotations

import argparse
import re
from typing import Any, Literal

from sweep.cli import UsageError

#: ``--pack``: a pack size, or ``auto`` (every run of a shape when the Ray cluster has GPUs, else 1).
PackRequest = int | Literal["auto"]


def add_pack_flags(g: argparse._ActionsContainer) -> None:
    """``--pack M`` and ``--dry-run``: the same words on every sweep CLI."""
    g.add_argument("--pack", default="auto", metavar="M",
                   help="runs of one shape (depth, condition) trained as one batched model in one trial: "
                   "an integer >= 1 (1 = one run per trial), or auto = all runs of a shape when the Ray "
                   "cluster has GPUs, else 1")
    g.add_argument("--dry-run", action="store_true",
                   help="print the plan (trials, packs and their members, resources per trial, optimiser "
                   "steps) and train nothing")


def pack_request(flag: str, value: Any) -> PackRequest:
    """``auto`` or a whole number >= 1 (from the command line's text or the API's int)."""
    if value == "auto":
        return "auto"
    k = int(value) if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value) else value
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UsageError(f"{flag} must be auto or a whole number of runs >= 1, got {value!r}")
    return k
