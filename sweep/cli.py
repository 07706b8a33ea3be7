"""What every entry point shares: one error line instead of a traceback, one flag language.

``run_cli(prog, argv, parse, body)`` parses, runs ``body(args)`` and turns the
project's own errors (bad values, ``StoreError``, ``CorpusError``,
``ManifestError``, a user file that is missing or unreadable) into one stderr
line ``{prog}: error: {message}`` and exit status 2, like argparse's own usage
errors; ``--debug`` lets the traceback through. ``CliExit`` is a ``SystemExit``
whose ``str`` is the message, so in-process callers can match it.

The checks (``positive``, ``at_least``, ``plain_name``, ``existing_path``, …)
raise ``UsageError`` naming the flag, the value and what would be valid.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: One default for ``--store`` in every CLI.
DEFAULT_STORE = "runs/store"
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class UsageError(ValueError):
    """A command-line or API value that is not valid; the message names it and what is."""


class CliExit(SystemExit):
    """Exit status 2 with the message as ``str`` (what ``pytest.raises(match=...)`` reads)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every default shown after its help; the description kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or "(default" in text:
            return text
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are the same one line as ``run_cli``'s (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the shared formatter and ``--debug``."""
    p = ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that are the user's to fix (imported lazily: no Ray, no torch)."""
    from sweep.store.parquet import StoreError

    return (ValueError, StoreError, FileNotFoundError, PermissionError,
            IsADirectoryError, NotADirectoryError, UnicodeDecodeError)


def fail(prog: str, message: str) -> CliExit:
    """Print ``{prog}: error: {message}`` to stderr; return the ``CliExit`` to raise."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return CliExit(message)


def run_cli(prog: str, argv: list[str] | None, parse: Callable[[list[str] | None], argparse.Namespace],
            body: Callable[[argparse.Namespace], T]) -> T:
    """``body(parse(argv))`` with the project's errors as one line and exit status 2."""
    args = parse(argv)
    try:
        return body(args)
    except CliExit:
        raise
    except user_errors() as exc:
        if getattr(args, "debug", False):
            raise
        raise fail(prog, describe(exc)) from None


def describe(exc: BaseException) -> str:
    """One line for an error: its message, with the file for OS errors."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- checks -----------------------------------------------------------------------------------


def at_least(flag: str, value: Any, low: float, note: str = "") -> None:
    """``value`` (if given) is a number >= ``low``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        low_text = int(low) if float(low).is_integer() else low
        raise UsageError(f"{flag} must be >= {low_text}{note}, got {value!r}")


def local_ray_sizes(address: str | None, num_cpus: int | None, num_gpus: int | None = None) -> None:
    """``--num-cpus`` / ``--num-gpus`` size a local Ray (>= 1 / >= 0); with ``--address`` they would be ignored."""
    at_least("--num-cpus", num_cpus, 1)
    at_least("--num-gpus", num_gpus, 0)
    for flag, value in (("--num-cpus", num_cpus), ("--num-gpus", num_gpus)):
        if address and value is not None:
            raise UsageError(f"{flag} {value} sizes a local Ray; with --address {address} the cluster's own "
                             f"{flag[6:].upper()}s are used (drop one of them)")


def positive(flag: str, value: Any) -> None:
    """``value`` (if given) is a number > 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise UsageError(f"{flag} must be > 0, got {value!r}")


def gpu_fraction(flag: str, value: float | None, available: float | None) -> None:
    """A GPU request Ray can place: 0 ≤ value ≤ one node's GPUs; above 1 a whole number."""
    if value is None:
        return
    if not value >= 0:
        raise UsageError(f"{flag} must be >= 0, got {value!r}")
    if value > 1 and not float(value).is_integer():
        raise UsageError(f"{flag} above 1 must be a whole number of GPUs, got {value!r}")
    if available is not None and value > available:
        raise UsageError(f"{flag} {value:g}: one node here has {available:g} GPUs; "
                         f"use 0..{available:g}")


def local_gpus() -> int:
    """GPUs a local Ray would see (CUDA devices visible to torch)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plain_name(flag: str, value: str | None) -> None:
    """A name that stays one path component: letters, digits, ``.``, ``_``, ``-``; no ``..``."""
    if value is None:
        return
    if not _PLAIN.fullmatch(value) or ".." in value:
        raise UsageError(f"{flag} must be a plain name (letters, digits, '.', '_', '-'; no '/' or '..'), "
                         f"got {value!r}")


def existing_path(flag: str, value: str | None, kind: str = "file") -> None:
    """A local path that exists (``kind`` file or dir); URIs are left to their readers."""
    if value is None or "://" in value:
        return
    path = Path(value)
    if not path.exists():
        raise UsageError(f"{flag} {value}: no such {'folder' if kind == 'dir' else 'file'}")
    if kind == "file" and not path.is_file():
        raise UsageError(f"{flag} {value}: not a file")
    if kind == "dir" and not path.is_dir():
        raise UsageError(f"{flag} {value}: not a folder")


def read_text(flag: str, value: str) -> str:
    """The UTF-8 text of a user file; errors name the flag, the file and the byte offset."""
    existing_path(flag, value)
    try:
        data = Path(value).read_bytes()
    except OSError as exc:
        raise UsageError(f"{flag} {value}: cannot read it ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{flag} {value}: not UTF-8 (byte 0x{data[exc.start]:02x} at byte offset "
                         f"{exc.start})") from None


def int_list(text: str) -> tuple[int, ...]:
    """argparse type: ``4,6,8`` → (4, 6, 8); with ``nargs="+"`` ``4 6 8`` works too."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 4,6,8 or 4 6 8, got {text!r}") from None


def name_list(text: str) -> tuple[str, ...]:
    """argparse type: ``a,b`` → ('a', 'b')."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def flatten(values: list[tuple[T, ...]] | None) -> tuple[T, ...] | None:
    """Join the per-word tuples of a ``nargs="+"`` list flag (``--depths 4,6 8``)."""
    if values is None:
        return None
    return tuple(v for part in values for v in part)
