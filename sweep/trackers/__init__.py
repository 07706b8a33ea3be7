"""Experiment trackers (MLflow, Weights & Biases): one tracker run per store run, from the store's rows.

* ``base``      what a tracker run holds (``RunInfo``, ``epoch_metrics``) and the ``Tracker`` interface;
* ``sender``    ``Sender``: rows → tracker runs, idempotent, a failing tracker costs one line;
* ``live``      the Tune callback that sends each trial's newly stored rows while the sweep runs;
* ``export``    ``python -m sweep.store export``: a whole store, the same runs and values;
* ``mlflow_tracker``, ``wandb_tracker``: one class each.

A third tracker is one module with a ``Tracker`` subclass and one line in ``TRACKERS``. The
flags (``--tracker``, ``--tracker-dir``) and their checks live here too: they run before Ray
starts and import no tracker package (``check_trackers`` only looks it up).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from sweep.cli import UsageError, name_list

#: --tracker value -> (module, class, package to import). The package is an extra: ``qkgeom[<name>]``.
TRACKERS: dict[str, tuple[str, str, str]] = {
    "mlflow": ("sweep.trackers.mlflow_tracker", "MlflowTracker", "mlflow"),
    "wandb": ("sweep.trackers.wandb_tracker", "WandbTracker", "wandb"),
}
#: Where trackers keep local files when the store is not a local path.
DEFAULT_DIR = "runs/trackers"


def add_tracker_flags(g: argparse._ActionsContainer, live: bool = True, what: str | None = None) -> None:
    """``--tracker`` (repeatable, or a comma list) and ``--tracker-dir``: the same words on every sweep CLI
    (``live``), on ``python -m sweep.store export`` and on ``python -m sweep.report``."""
    what = what or ("also log every run to an experiment tracker, live" if live else "the experiment tracker to send to")
    g.add_argument("--tracker", action="append", type=name_list, metavar="NAME",
                   help=f"{what}: {', '.join(TRACKERS)} (repeat or comma-separate for several"
                   f"{'; default none' if live else ''})")
    g.add_argument("--tracker-dir", metavar="DIR",
                   help="local tracker files (MLflow's SQLite store unless MLFLOW_TRACKING_URI is set, W&B's "
                   f"offline runs): default 'trackers' beside a local --store, else {DEFAULT_DIR}")


def trackers_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The --tracker values, flattened, each once, in order."""
    return tuple(dict.fromkeys(n for part in (getattr(args, "tracker", None) or ()) for n in part))


def check_trackers(flag: str, names: Iterable[str]) -> None:
    """Each name is a known tracker whose package is installed (looked up, not imported)."""
    for name in names:
        if name not in TRACKERS:
            raise UsageError(f"{flag} {name}: choose from {', '.join(TRACKERS)}")
        package = TRACKERS[name][2]
        if importlib.util.find_spec(package) is None:
            raise UsageError(f"{flag} {name}: the {package} package is not installed; "
                             f"pip install 'qkgeom[{name}]'")


def tracker_folder(tracker_dir: str | None, store: str) -> Path:
    """``--tracker-dir``, else ``trackers`` beside a local store (``runs/store`` -> ``runs/trackers``),
    else ``runs/trackers``."""
    if tracker_dir:
        return Path(tracker_dir)
    if "://" in store and not store.startswith("file://"):
        return Path(DEFAULT_DIR)
    local = Path(store.removeprefix("file://")).expanduser().absolute()
    return local.parent / "trackers"


def make_trackers(names: Iterable[str], folder: Path, folder_given: bool = False, name_given: bool = False) -> list:
    """One ``Tracker`` per name (checked names; nothing imported but the tracker's own module).
    ``folder_given``: --tracker-dir was given (it wins over ``WANDB_DIR``); ``name_given``: --name was
    given (it wins over ``MLFLOW_EXPERIMENT_NAME`` and ``WANDB_RUN_GROUP``)."""
    out = []
    for name in names:
        module, cls, _ = TRACKERS[name]
        out.append(getattr(importlib.import_module(module), cls)(folder, folder_given, name_given))
    return out


def export_command(store: str, names: Iterable[str], tracker_dir: str | None) -> str:
    """The ``python -m sweep.store export`` command that sends a store's runs to ``names``."""
    import shlex

    parts = ["python", "-m", "sweep.store", "export", "--store", store]
    for name in names:
        parts += ["--tracker", name]
    if tracker_dir:
        parts += ["--tracker-dir", tracker_dir]
    return shlex.join(parts)


__all__ = ["DEFAULT_DIR", "TRACKERS", "add_tracker_flags", "check_trackers", "export_command", "make_trackers",
           "tracker_folder", "trackers_from_args"]
