"""The reducer: read the store, compute SPEC §8, write stats.json, tables, figures and report.md.

The command line of ``python -m sweep.report``; the layout it writes is described in
``sweep/report/__init__.py``.
"""


from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from model.plugins import add_plugin_flag, preload
from sweep.cli import DEFAULT_STORE, UsageError, parser, run_cli
from sweep.trackers import add_tracker_flags, check_trackers, tracker_folder, trackers_from_args

if TYPE_CHECKING:  # the statistics and the store are imported after the flags: --help answers at once
    from sweep.store import Store

PROG = "python -m sweep.report"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    preload(argv, PROG)  # --plugin modules: labels and colours of their names
    ap = parser(PROG, __doc__.splitlines()[0])
    add_plugin_flag(ap)
    ap.add_argument("--store", default=DEFAULT_STORE, help="store root: a path or s3://bucket/prefix")
    ap.add_argument("--out", default="runs/report",
                    help="output folder: a path or a URI like --store's (s3://bucket/prefix)")
    ap.add_argument("--no-figures", action="store_true", help="skip figure rendering")
    ap.add_argument("--preset", default=None, help="report only this preset (default: each, separately)")
    add_tracker_flags(ap, live=False, what="also attach the report to each sweep's sweep-level run in a tracker")
    return ap.parse_args(argv)


def output_target(out: str) -> Store | None:
    """None for a local folder; else the ``Store`` (file system) a URI names, checked writable."""
    from sweep.store import Store, StoreError

    if "://" not in out or out.startswith("file://"):
        return None
    try:
        target = Store(out)
    except StoreError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc}); give a path or a URI that "
                         "pyarrow.fs opens (s3://, gs://, file://)") from None
    target.check_writable()
    return target


def write_outputs(local: Path, target: Store) -> None:
    """Copy the report folder built in ``local`` under ``target``'s root."""
    import pyarrow.fs as pafs

    pafs.copy_files(str(local), target.base, source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=target.fs)


def main(argv: list[str] | None = None) -> int:
    """Write the report; a bad value ends it with one line and exit status 2."""
    return run_cli(PROG, argv, _parse, _main)


def _main(args: argparse.Namespace) -> int:
    trackers = trackers_from_args(args)
    check_trackers("--tracker", trackers)  # known and installed, before anything is computed
    failed: dict[str, str] = {}
    write_report(args.store, args.out, preset=args.preset, figures=not args.no_figures,
                 trackers=trackers, tracker_dir=args.tracker_dir, failed=failed)
    return 1 if failed else 0


def write_report(store: str, out: str, preset: str | None = None, figures: bool = True,
                 trackers: tuple[str, ...] = (), tracker_dir: str | None = None,
                 failed: dict[str, str] | None = None) -> dict:
    """Report the store at ``store`` into ``out`` (a folder or URI), print the headline and the
    scorecard, and return the statistics (``stats.json``). ``preset``: that preset only.
    ``trackers``: also attach it to each sweep's sweep-level run there (``sweep.trackers.report``;
    the ones that failed go into ``failed``)."""
    from sweep.report.inputs import load_tables
    from sweep.report.prose import headline
    from sweep.report.sequential import load_records
    from sweep.report.writer import PresetNotInStore, build_report
    from sweep.store import Store

    if not Store(store).exists():
        raise UsageError(f"--store {store}: no store there (run a sweep first, or check the path)")
    target = output_target(out)
    skipped: list[dict] = []
    tables = load_tables(store, skipped)

    def attach(folder: Path, s: dict) -> None:
        if not trackers:
            return
        from sweep.trackers.report import attach_report

        presets = [preset] if preset else None
        lost = attach_report(store, folder, s, trackers, tracker_folder(tracker_dir, store),
                             folder_given=tracker_dir is not None, presets=presets)
        if failed is not None:
            failed.update(lost)

    sequential = load_records(store)  # --seeds auto's decisions, per claim
    try:
        if target is None:
            local = Path(out.removeprefix("file://"))
            s = build_report(tables, local, figures=figures, preset=preset, skipped_files=skipped,
                             sequential=sequential)
            attach(local, s)
        else:
            with tempfile.TemporaryDirectory(prefix="qkgeom-report-") as tmp:
                s = build_report(tables, Path(tmp), figures=figures, preset=preset, skipped_files=skipped,
                                 sequential=sequential)
                write_outputs(Path(tmp), target)
                attach(Path(tmp), s)
    except PresetNotInStore as exc:
        raise UsageError(str(exc)) from None
    print(f"{out.rstrip('/')}/report.md")
    for name, one in (s.get("by_preset") or {None: s}).items():
        for line in headline(one):
            print("  " + (f"[{name}] " if name else "") + line)
    print_scorecard(s)
    return s


def print_scorecard(s: dict) -> None:
    """The scorecard on stdout, one block per preset (what ``make demo`` ends with)."""
    from analysis import scorecard as sc

    rows = s.get("scorecard") or []
    for name in dict.fromkeys(r["preset"] for r in rows):
        mine = [r for r in rows if r["preset"] == name]
        one = (s.get("by_preset") or {}).get(name, s)
        print("\n" + "\n".join(sc.console(mine, name, (one.get("preset_notes") or {}).get(name, []))))
    if s.get("skipped_files"):
        print(f"\n{len(s['skipped_files'])} unreadable store file(s) skipped: see report.md")
