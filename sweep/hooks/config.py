"""A sweep's trial hooks from end to end: the hidden flags that name them (``add_fault_flags``), the
Tune config's ``hooks`` they become in the driver (``hooks_from_args``: ``SweepSettings.hooks``),
and the hook objects the trainable builds from that config (``hooks_of``). The hooks themselves are
``sweep.hooks.base`` and ``sweep.hooks.faults``; neither imports this module.
"""

from __future__ import annotations

import argparse
from typing import Any

from sweep.hooks.base import HOOKS, TrialHook
from sweep.hooks.faults import fault_from_config


def add_fault_flags(g: argparse._ActionsContainer) -> None:
    """The hidden flags of tests and benchmarks: the crash (``--fail-after-epoch``,
    ``--failure-marker-dir``) and any other trial hook (``--trial-hook NAME``, repeatable)."""
    g.add_argument("--fail-after-epoch", type=int, help=argparse.SUPPRESS)
    g.add_argument("--failure-marker-dir", help=argparse.SUPPRESS)
    g.add_argument("--trial-hook", action="append", default=[], help=argparse.SUPPRESS)


def hooks_from_args(args: argparse.Namespace, fault: Any = None) -> dict[str, dict[str, Any]]:
    """``SweepSettings.hooks`` from the hidden flags: ``--trial-hook`` names and the fault injection."""
    from sweep.cli import UsageError

    hooks: dict[str, dict[str, Any]] = {}
    for name in getattr(args, "trial_hook", None) or []:
        if name not in HOOKS or name == "fault":
            raise UsageError(f"--trial-hook {name}: unknown; valid: {', '.join(sorted(set(HOOKS) - {'fault'}))}")
        hooks[name] = {}
    if fault is not None:
        hooks["fault"] = fault.to_config()
    return hooks


def hooks_of(config: dict[str, Any]) -> list[TrialHook]:
    """The trial's hooks, from its Tune config (``hooks``; an experiment started before hooks carries
    its fault injection under ``fault``, or in a version 1 config's options: read as the ``fault`` hook)."""
    settings = dict(config.get("hooks") or {})
    hooks = [HOOKS[name](**(value or {})) for name, value in settings.items() if name != "fault"]
    fault = fault_from_config({"fault": settings["fault"]} if "fault" in settings else config)
    return hooks + ([fault] if fault is not None else [])
