"""``python -m sweep.baseline``: the observational grid (depths × inits × seeds) on Ray Tune; with
``--seeds auto``, in rounds of seeds until each of the scorecard's baseline claims is decided."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from model.plugins import preload
from sweep.auto_flags import add_auto_flags, auto_from_args
from sweep.cli import parser, run_cli
from sweep.presets import BASELINE_PRESETS, add_grid_flags, preset_from_args
from sweep.run_flags import add_run_flags
from sweep.settings import settings_from_args
from sweep.summary import exit_status

if TYPE_CHECKING:
    import pandas as pd

PROG = "python -m sweep.baseline"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    preload(argv, PROG)  # --plugin modules: their names are valid below
    p = parser(PROG, __doc__)
    add_grid_flags(p, BASELINE_PRESETS)
    add_auto_flags(p)
    add_run_flags(p, "baseline-<preset>")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Run the sweep; a bad value ends it with one line and exit status 2, before Ray starts."""

    def body(args: argparse.Namespace) -> pd.DataFrame:
        from sweep.runner import run_sweep  # the Tune driver: after the flags
        from sweep.sequential import run_auto  # the rounds (pandas, scipy): after the flags

        auto = auto_from_args(args)  # before the preset: --seeds auto with --seed-list is refused there
        preset = preset_from_args(args, BASELINE_PRESETS)
        if auto is not None:
            return run_auto(preset, settings_from_args(args, f"baseline-{preset.name}-auto"), auto)
        return run_sweep(preset, settings_from_args(args, f"baseline-{preset.name}"))

    return run_cli(PROG, argv, parse, body)


if __name__ == "__main__":
    sys.exit(exit_status(main()))  # 1 when a run ended in error
