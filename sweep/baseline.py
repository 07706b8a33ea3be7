"""``python -m sweep.baseline``: the observational grid (depths × inits × seeds) on Ray Tune."""

from __future__ import annotations

import argparse

from model.plugins import preload
from sweep.presets import BASELINE_PRESETS, add_grid_flags, preset_from_args
from sweep.runner import add_run_flags, run_sweep


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    preload(argv, "python -m sweep.baseline")  # --plugin modules: their names are valid below
    p = argparse.ArgumentParser(prog="python -m sweep.baseline", description=__doc__)
    add_grid_flags(p, BASELINE_PRESETS)
    add_run_flags(p, "baseline-<preset>")
    return p.parse_args(argv)


def main(argv: list[str] | None = None):
    args = parse(argv)
    try:
        preset = preset_from_args(args, BASELINE_PRESETS)
    except ValueError as err:
        raise SystemExit(f"sweep.baseline: {err}") from None
    return run_sweep(preset, args, args.name or f"baseline-{preset.name}")


if __name__ == "__main__":
    main()
