"""``python -m sweep.store {validate,compact,export} [--store URI]``: check, compact or export a store."""

from __future__ import annotations

import warnings

from sweep.cli import DEFAULT_STORE, ArgumentParser, HelpFormatter, UsageError, fail
from sweep.trackers import add_tracker_flags, check_trackers, tracker_folder, trackers_from_args

#: the store's tables (``sweep.store.schema.TABLES``, which tests/test_entry_points.py checks this
#: against): named here so that the parser imports no pyarrow (``--help`` answers at once)
TABLES = ("layers", "epochs", "checkpoints", "runs")


def main(argv: list[str] | None = None) -> int:
    """``python -m sweep.store {validate,compact,export} [--store URI]``.

    Exit status: 0 fine; 1 ``validate`` found problems in the store, or a tracker ``export`` sent to
    failed; 2 the store cannot be read (or a bad value), with one line on stderr.
    """
    prog = "python -m sweep.store"
    parser = ArgumentParser(prog=prog, description="Check, compact or export a store.",
                                     formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate", formatter_class=HelpFormatter,
                   help="report duplicates, gaps, NaNs, unreadable files; exit 1 if any, 2 if unreadable")
    pc = sub.add_parser("compact", formatter_class=HelpFormatter,
                        help="merge per-epoch files into one file per run directory")
    pc.add_argument("--table", choices=TABLES, help="one table (default: all)")
    pc.add_argument("--force", action="store_true", help="compact even while a sweep lock is fresh")
    pe = sub.add_parser("export", formatter_class=HelpFormatter,
                        help="send every run to experiment trackers (the runs a sweep with --tracker logs; "
                        "idempotent)")
    add_tracker_flags(pe, live=False)
    pe.add_argument("--force", action="store_true", help="export even while a sweep lock is fresh")
    for p in sub.choices.values():
        p.add_argument("--store", default=DEFAULT_STORE, help="root: path, file:// or s3://bucket/prefix")
        p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = parser.parse_args(argv)
    from sweep.store.compact import compact  # after the flags: pandas and pyarrow
    from sweep.store.parquet import READ_ERRORS, Store, StoreError
    from sweep.store.validate import validate

    try:
        if args.command == "export":
            names = trackers_from_args(args)
            if not names:
                raise UsageError("--tracker: give at least one tracker to export to")
            check_trackers("--tracker", names)
        store = Store(args.store)
        if not store.exists():
            raise StoreError(f"--store {args.store}: no store there (nothing to {args.command})")
        if args.command == "validate":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the report lists unreadable files
                report = validate(store)
            print(report)
            return 0 if report.ok else 1
        if args.command == "export":
            from sweep.trackers.export import export

            sender = export(store, names, tracker_folder(args.tracker_dir, args.store), force=args.force,
                            folder_given=args.tracker_dir is not None)
            return 1 if sender.dead else 0
        print(compact(store, args.table, force=args.force))
        return 0
    except UsageError as exc:
        if args.debug:
            raise
        raise fail(prog, str(exc)) from None
    except (StoreError, *READ_ERRORS) as exc:
        if args.debug:
            raise
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if not isinstance(exc, StoreError):
            text = f"cannot read the store {args.store}: {text}"
        raise fail(prog, text) from None
