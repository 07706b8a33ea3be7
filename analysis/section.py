"""A reducer section: one statistic in one object, and ``Analysis``, what ``compute_all`` returns.

A ``Section`` declares what it computes (``compute`` -> a typed ``Result``), its
heading in report.md, its sentences (``prose``), its tables, its figures and its
scorecard claims. ``analysis.compute`` keeps the registry (``register_section``,
``sections``); ``compute_all``, the tables, report.md, the prose and the writer
iterate over it. ``stats.json`` is each result's ``to_json()`` (the one NaN -> null
conversion, ``analysis.primitives.to_jsonable``), written at the end.

Sections are pure pandas/numpy (no Ray, no matplotlib): a figure is named by the
path of its drawing function (``Figure.draw``), which the report's writer imports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

import pandas as pd

from analysis.claims import Claim
from analysis.primitives import to_jsonable
from analysis.reference import PAPER_REFERENCE


class Result:
    """Base of a section's typed result (a dataclass); ``to_json`` gives its stats.json entries."""

    key: ClassVar[str]  # the stats.json key of the whole result (override ``to_json`` for several)

    def to_json(self) -> dict[str, object]:
        return {self.key: to_jsonable(self)}


R = TypeVar("R", bound=Result)


@dataclass
class Computed(Generic[R]):
    """What ``Section.compute`` returns: the result (None when nothing is computable), the
    reasons for what is missing, and the frames that figures and scorecard claims read."""

    result: R | None
    missing: dict[str, str] = field(default_factory=dict)
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """One preset's tables as the sections see them (diverged and incomplete runs dropped), and the
    post-collapse window fixed before the data (None: chosen on these runs, descriptive)."""

    layers: pd.DataFrame
    epochs: pd.DataFrame
    checkpoints: pd.DataFrame
    window: Window | None = None


@dataclass(frozen=True)
class Window:
    """The post-collapse window's first epoch ``e_c`` fixed before the data (SPEC §8), and where it
    comes from (e.g. "the demo preset's schedule seeds 37, 42")."""

    start: int | None
    source: str


@dataclass(frozen=True)
class Figure:
    """A section's figure: file name, caption, and its drawing function as ``"module:function"``,
    called ``function(analysis, out_dir) -> [png, pdf]`` ([] when there is nothing to draw)."""

    name: str
    caption: str
    draw: str


class Section(ABC, Generic[R]):
    """One reducer statistic: subclass, set the class attributes, implement ``compute``."""

    name: ClassVar[str]  # stats.json key; also the key of its reason under ``missing``
    heading: ClassVar[str]  # its report.md heading (without the "## ")
    reads: ClassVar[tuple[str, ...]]  # sweeps ("baseline", "interventions") or "checkpoints" it reads
    table_names: ClassVar[tuple[str, ...]] = ()  # the keys ``tables`` returns, in report order
    figures: ClassVar[tuple[Figure, ...]] = ()
    #: An optional section is left out of report.md when it has no result and no reason under
    #: ``missing`` (nothing of its kind was run), instead of showing "No data".
    optional: ClassVar[bool] = False

    @abstractmethod
    def compute(self, data: Inputs) -> Computed[R]:
        """The section's typed result from one preset's tables (None, with a reason, when it has none)."""

    def tables(self, result: R) -> dict[str, pd.DataFrame | None]:
        """Each of ``table_names`` -> its DataFrame (None or empty: not written)."""
        return {}

    def prose(self, result: R) -> list[str]:
        """The sentences under the heading, one paragraph each."""
        return []

    def claims(self, an: Analysis, paper_scale: bool) -> list[Claim]:
        """The scorecard rows of this section, before their verdicts."""
        return []


@dataclass
class Analysis:
    """Result of ``compute_all``: typed results per section, the bookkeeping, and the frames."""

    results: dict[str, Result | None]  # section name -> result, in report order (None: not computable)
    provenance: dict
    missing: dict[str, str]
    notes: list[str]
    frames: dict[str, pd.DataFrame]
    layers: pd.DataFrame
    epochs: pd.DataFrame
    checkpoints: pd.DataFrame

    @property
    def stats(self) -> dict:
        """The statistics part of stats.json, JSON-ready (a section without data is None)."""
        out: dict = {"provenance": self.provenance}
        for r in self.results.values():
            if r is not None:
                out.update(r.to_json())
        for name in self.results:
            out.setdefault(name, None)
        out["missing"] = self.missing
        out["notes"] = self.notes
        out["reference"] = PAPER_REFERENCE
        return to_jsonable(out)


def left_out(sec: Section, an: Analysis) -> bool:
    """An optional section with nothing to show and nothing to say: no heading, tables or figures
    in the report and no entry under ``missing``."""
    return (sec.optional and an.results.get(sec.name) is None
            and not any(k.split(".")[0] == sec.name for k in an.missing))
