"""``python -m sweep.interventions``: the K-pathway interventions (conditions × inits × seeds) on Ray Tune."""

from __future__ import annotations

import argparse

from model.plugins import preload
from sweep.presets import INTERVENTION_PRESETS, add_grid_flags, preset_from_args
from sweep.runner import add_run_flags, run_sweep


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    preload(argv, "python -m sweep.interventions")  # --plugin modules: their names are valid below
    p = argparse.ArgumentParser(prog="python -m sweep.interventions", description=__doc__)
    add_grid_flags(p, INTERVENTION_PRESETS, conditions=True)
    add_run_flags(p, "interventions-<preset>")
    return p.parse_args(argv)


def main(argv: list[str] | None = None):
    args = parse(argv)
    try:
        preset = preset_from_args(args, INTERVENTION_PRESETS)
    except ValueError as err:
        raise SystemExit(f"sweep.interventions: {err}") from None
    return run_sweep(preset, args, args.name or f"interventions-{preset.name}")


if __name__ == "__main__":
    main()
