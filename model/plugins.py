"""``--plugin MODULE``: import a researcher's module so its registrations take effect.

A plugin module registers init regimes (``@register_init`` in ``model.qk_init``)
and conditions (``@register`` in ``interventions``) at import time. Every entry
point calls ``preload(argv, prog)`` before it builds its parser, so the new
names are valid choices when the inputs are checked. ``Plugins`` is the one
carrier of the list into Ray workers: the same value travels in every trial's
run spec (``sweep.trial.spec.TrialSpec.plugins``) and in every probe actor's settings
(``ProbeSettings.plugins``), and each worker calls ``load()`` before its work.
The module must be importable where it runs: on ``PYTHONPATH`` or installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

PLUGIN_HELP = ("import MODULE first (repeatable): a module that registers init regimes or "
               "conditions; it is imported again in every Ray worker")


class PluginError(ImportError):
    """A ``--plugin`` module cannot be imported."""


def load_plugins(modules: Iterable[str]) -> list[ModuleType]:
    """Import each module (a no-op for one already imported); one clear error for the first failure."""
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except Exception as exc:  # ImportError, or an error raised by the module's own code
            raise PluginError(
                f"--plugin {name}: cannot import it ({type(exc).__name__}: {exc}); "
                "give a dotted module name importable from the working directory or PYTHONPATH"
            ) from exc
    return loaded


@dataclass(frozen=True)
class Plugins:
    """A command's ``--plugin`` modules, in the order given; what every Ray worker of it imports first."""

    modules: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plugins:
        return cls(tuple(args.plugin))

    def load(self) -> list[ModuleType]:
        """Import the modules in this process (a no-op for those already imported)."""
        return load_plugins(self.modules)


def add_plugin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE", help=PLUGIN_HELP)


def preload(argv: Sequence[str] | None, prog: str) -> tuple[str, ...]:
    """Import the ``--plugin`` modules named in ``argv`` (None: sys.argv) before the real parse.

    Returns their names; a module that cannot be imported exits with one line naming it.
    """
    pre = argparse.ArgumentParser(add_help=False)
    add_plugin_flag(pre)
    known, _ = pre.parse_known_args(argv)
    try:
        load_plugins(known.plugin)
    except PluginError as err:  # the same one line and exit status 2 as every other bad input
        print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    return tuple(known.plugin)
