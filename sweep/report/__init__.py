"""The reducer: read the store, compute SPEC §8, write stats.json, tables, figures and report.md.

    python -m sweep.report [--store runs/store] [--out runs/report] [--no-figures] [--preset NAME]
                           [--plugin MODULE ...]

``write_report(store, out, preset)`` is the command as a function;
``build_report(tables, out)`` does the same on in-memory DataFrames. The
report works on whatever the store holds (an empty store included) and lists
what it could not compute under ``missing``.

Presets are never pooled (SPEC §8). A store holding one preset gives the
layout above, with ``stats.json`` holding that preset's sections. A store
holding several gives one report per preset under ``presets/<name>/`` and a
top-level ``report.md`` / ``stats.json`` with every preset's scorecard and
section (``stats.json["by_preset"][name]``). ``--preset NAME`` reports one
preset; naming a preset the store lacks exits with status 2. Both layouts put
the scorecard (``analysis.scorecard``) first and list unreadable store files
under ``skipped_files``.

One module per idea: ``inputs`` (reading the store), ``writer`` (``build_report``:
one preset's statistics, tables, figures and scorecard, or one report per preset),
``markdown`` (report.md), ``prose`` (the headline), ``tables`` (export, and the paper's
values beside ours), ``figures`` (the drawing functions the sections name) and ``cli``
(``python -m sweep.report``). Each section's computation, tables, sentences, heading and
figure names are its ``analysis.section.Section`` (registry: ``analysis.compute.sections()``);
the writer and report.md iterate over them. The names below are the package's API; its
modules import each other directly, never through here.
"""

from __future__ import annotations

import importlib
from typing import Any

# loaded on first use (PEP 562): ``python -m sweep.report --help`` imports no statistics
_WHERE = {"main": "sweep.report.cli", "output_target": "sweep.report.cli", "write_report": "sweep.report.cli",
          "load_tables": "sweep.report.inputs", "PresetNotInStore": "sweep.report.writer",
          "build_report": "sweep.report.writer"}
__all__ = ["PresetNotInStore", "build_report", "load_tables", "main", "output_target", "write_report"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sweep.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
