"""Sets of seeds (SPEC §7 "Sets"): public checkpoint series that retrain one model with other seeds,
and the revisions every seed of a set is probed at.

A **set** is the seeds of one model: series that share architecture, data and schedule and differ
in a seed (``varies``, one of ``metrics.columns.SET_FACTORS``: the seed as a whole, the weight
initialisation only, or the data order only). Each member series carries its set and its seed
label into every stored row, so that Appendix A can test its statistics across seeds, a seed being
the unit (``analysis.suites``).

The registry (``SETS``) holds what the sources say; the Hub's listing decides at run time:

* ``polypythias-{14m,31m,70m,160m,410m}``: the original Pythia of that size (seed 0; ``SERIES``)
  and ``EleutherAI/pythia-<size>-seed<N>``, N = 1…9 by the PolyPythias model cards (arXiv 2503.09543,
  "Naming Convention": ``pythia-{size}m-seed{1-9}``, the original trained with seed 1234);
  ``polypythias`` names all five;
* ``polypythias-160m-weight-seed`` (``EleutherAI/pythia-160m-weight-seed<N>``: only the weight
  initialisation varies, the data order is the original's) and ``polypythias-160m-data-seed``
  (``…-data-seed<N>``: only the data order varies): three each by the same model cards. The original
  shares the fixed factor of both and belongs to neither, so that the two sets' spreads are
  independent samples (``analysis.suites``: their ratio is tested).

None of this was checked against the live Hub (no network where it was written): ``set_entries``
lists the author's models (``HfApi.list_models``) and takes every repository matching the set's
pattern, whatever the count; a seed the sources name that the listing lacks is reported, not
invented. Branches are listed per member (``list_repo_refs``), never built, and the log-uniform pick
(``select_log_uniform``) is made **once per set from the steps every seed has**, so every seed is
probed at the same revisions and per-revision comparisons across seeds are paired; a step that some
seed lacks (EleutherAI/pythia#202: three PolyPythias checkpoints are missing) is never picked, and
the notes say which seed lacks which steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from metrics.columns import SET_FACTORS
from sweep.extension.checkpoint_series import (
    DEFAULT_REVISIONS,
    SERIES,
    Manifest,
    RevisionEntry,
    Series,
    SeriesEntry,
    build_manifest,
    hub_branches,
    hub_tokens_per_step,
    list_step_revisions,
    select_log_uniform,
)

#: Where the registry's facts come from.
POLYPYTHIAS_SOURCE = ("PolyPythias model cards (e.g. EleutherAI/pythia-14m-seed1, 'Naming Convention'; "
                      "van der Wal et al., ICLR 2025, arXiv 2503.09543); not checked against the live Hub")


@dataclass(frozen=True)
class SeedSet:
    """One set of seeds: its original series (seed 0, a ``SERIES`` name, or None), the pattern of its
    other members' repositories (full match; group 1 is the seed number), how the Hub's listing finds
    them (author, search text), what its seeds vary, the seeds the source names, and the ``SERIES``
    entry its members are like (architecture, branch pattern, tokens per step)."""

    name: str
    original: str | None
    members: str
    author: str
    search: str
    varies: str
    known: tuple[int, ...]
    like: str
    source: str = POLYPYTHIAS_SOURCE

    def __post_init__(self) -> None:
        if self.varies not in SET_FACTORS:
            raise ValueError(f"set {self.name}: varies {self.varies!r} is not one of {', '.join(SET_FACTORS)}")
        if self.like not in SERIES or (self.original is not None and self.original not in SERIES):
            raise ValueError(f"set {self.name}: {self.like!r} / {self.original!r} not in the series registry")

    def member(self, repo: str) -> int | None:
        """The seed of a listed repository when it is one of this set's, else None."""
        m = re.fullmatch(self.members, repo)
        return int(m.group(1)) if m else None


POLYPYTHIAS_SIZES = ("14m", "31m", "70m", "160m", "410m")

SETS: dict[str, SeedSet] = {
    s.name: s
    for s in (
        *(SeedSet(f"polypythias-{size}", f"pythia-{size}", rf"EleutherAI/pythia-{size}-seed(\d+)", "EleutherAI",
                  f"pythia-{size}-seed", "seed", tuple(range(1, 10)), f"pythia-{size}")
          for size in POLYPYTHIAS_SIZES),
        SeedSet("polypythias-160m-weight-seed", None, r"EleutherAI/pythia-160m-weight-seed(\d+)", "EleutherAI",
                "pythia-160m-weight-seed", "weights", (1, 2, 3), "pythia-160m"),
        SeedSet("polypythias-160m-data-seed", None, r"EleutherAI/pythia-160m-data-seed(\d+)", "EleutherAI",
                "pythia-160m-data-seed", "data order", (1, 2, 3), "pythia-160m"),
    )
}
#: Names that stand for several sets.
SET_ALIASES: dict[str, tuple[str, ...]] = {"polypythias": tuple(f"polypythias-{s}" for s in POLYPYTHIAS_SIZES)}


def selection_names() -> list[str]:
    """Every name ``--series`` takes: the series, the sets and their aliases."""
    return [*SERIES, *SETS, *SET_ALIASES]


def hub_models(author: str, search: str) -> list[str]:
    """Ids of the author's Hub models whose name contains ``search`` (network; transient errors tried again)."""
    from huggingface_hub import HfApi

    from sweep.extension.hub import with_hub_retries

    return with_hub_retries(lambda: [m.id for m in HfApi().list_models(author=author, search=search)])


@dataclass
class SetPlan:
    """A set as the listing found it: its series entries (every seed at the same revisions) and the
    notes a user should read (seeds the source names that the listing lacks, steps some seed lacks)."""

    name: str
    entries: list[SeriesEntry]
    notes: list[str]


def set_entries(s: SeedSet, n: int = DEFAULT_REVISIONS,
                list_branches: Callable[[str], list[str]] = hub_branches,
                list_models: Callable[[str, str], list[str]] = hub_models) -> SetPlan:
    """The set's members from the listing, each at the same ``n`` revisions: picked log-uniformly once,
    from the steps every member has (see the module docstring). A ``ValueError`` when the listing holds
    no member or the members share no step."""
    like = SERIES[s.like]
    found = sorted({seed: repo for repo in list_models(s.author, s.search) if (seed := s.member(repo)) is not None}.items())
    members: list[tuple[str, Series]] = [("0", SERIES[s.original])] if s.original is not None else []
    for seed, repo in found:
        members.append((str(seed), replace(like, name=repo.split("/", 1)[1].lower(), repo=repo, default=False,
                                           doc=f"seed {seed} of {s.name}")))
    if not found:
        raise ValueError(f"set {s.name}: the Hub lists no repository matching {s.members!r} "
                         f"(author {s.author}, search {s.search!r})")
    notes = []
    absent = [k for k in s.known if k not in dict(found)]
    if absent:
        notes.append(f"set {s.name}: the Hub lists no seed {', '.join(map(str, absent))} (the sources name seeds "
                     f"{', '.join(map(str, s.known))}): probing the {len(members)} series it lists")
    branches = {seed: dict(list_step_revisions(series, list_branches(series.repo))) for seed, series in members}
    every = set.intersection(*(set(b) for b in branches.values()))
    if not every:
        raise ValueError(f"set {s.name}: its {len(members)} series share no step branch")
    seen = set().union(*(set(b) for b in branches.values()))
    for (seed, series), steps in zip(members, branches.values(), strict=True):
        lacks = sorted(seen - set(steps))
        if lacks:
            shown = ", ".join(f"step {k}" for k in lacks[:3]) + (f" and {len(lacks) - 3} more" if len(lacks) > 3 else "")
            notes.append(f"set {s.name}: {series.name} (seed {seed}) lacks {shown}: only steps every seed has "
                         "are picked")
    picked = select_log_uniform(sorted(every), n)
    entries = [SeriesEntry(series.name, [RevisionEntry(branches[seed][k], repo=series.repo, step=k,
                                                       tokens=None if like.tokens_per_step is None
                                                       else k * like.tokens_per_step) for k in picked],
                           group=s.name, seed=seed, varies=s.varies)
               for seed, series in members]
    return SetPlan(s.name, entries, notes)


def expand_selection(names: Iterable[str], n: int = DEFAULT_REVISIONS,
                     list_branches: Callable[[str], list[str]] = hub_branches,
                     list_models: Callable[[str, str], list[str]] = hub_models,
                     tokens_per_step: Callable[[str, str], int | None] = hub_tokens_per_step,
                     ) -> tuple[Manifest, list[str]]:
    """The manifest of ``--series`` names (series, sets, aliases; lists the Hub) and the sets' notes. A
    series that is also a member of a named set is probed once, as the set's."""
    wanted = [x for name in names for x in SET_ALIASES.get(name, (name,))]
    unknown = [x for x in wanted if x not in SERIES and x not in SETS]
    if unknown:
        raise ValueError(f"unknown series or set {unknown[0]!r}; known: {', '.join(selection_names())}")
    entries: dict[str, SeriesEntry] = {}
    notes: list[str] = []
    for name in dict.fromkeys(wanted):
        if name in SETS:
            plan = set_entries(SETS[name], n, list_branches, list_models)
            entries |= {e.name: e for e in plan.entries}
            notes += plan.notes
    alone = [x for x in dict.fromkeys(wanted) if x in SERIES and x not in entries]
    if alone:
        entries |= {e.name: e for e in build_manifest(alone, n, list_branches, tokens_per_step).series}
    return Manifest(list(entries.values())), notes


def unpaired(manifest: Manifest) -> list[str]:
    """One warning per set of ``manifest`` whose seeds are not all at the same revisions (by step, else
    by revision name): Appendix A pairs them, so a revision some seed lacks is left out of every seed's
    statistics (``analysis.suites``)."""
    sets: dict[str, list[SeriesEntry]] = {}
    for s in manifest.series:
        if s.group is not None:
            sets.setdefault(s.group, []).append(s)
    out = []
    for group, members in sets.items():
        keys = {m.seed: {r.step if r.step is not None else r.revision for r in m.revisions} for m in members}
        every = set.intersection(*keys.values())
        short = {seed: sorted(map(str, set().union(*keys.values()) - k)) for seed, k in keys.items()}
        short = {seed: lacks for seed, lacks in short.items() if lacks}
        if short:
            said = "; ".join(f"seed {seed} lacks {', '.join(lacks[:3])}{' …' if len(lacks) > 3 else ''}"
                             for seed, lacks in short.items())
            out.append(f"[extension] warning: set {group}: its seeds are not at the same revisions ({said}); "
                       f"Appendix A pairs them on the {len(every)} every seed has")
    return out


def label_sets(store, jobs) -> int:
    """Give the stored rows of ``jobs`` (``revision_probe.Job``s in a set) the job's set, seed and
    ``varies`` where they carry others (a revision probed before, alone or in another selection, and
    skipped now as already stored): a series belongs to one set, the one the manifest names. Rows
    of every status are relabelled, nothing else changes; returns the revisions rewritten."""
    from sweep.store.parquet import safe_name

    wanted = {(j.series, j.revision): (j.group, j.seed, j.varies) for j in jobs if j.group is not None}
    n = 0
    for series in sorted({s for s, _ in wanted}):
        by_rev: dict[str, list[dict]] = {}
        for row in store.scan("checkpoints", subdir=safe_name(series)).table.to_pylist():
            if (row["series"], row["revision"]) in wanted:
                by_rev.setdefault(row["revision"], []).append(row)
        for revision, rows in by_rev.items():
            group, seed, varies = wanted[(series, revision)]
            if any((r.get("group"), r.get("seed"), r.get("varies")) != (group, seed, varies) for r in rows):
                store.write_checkpoint([{**r, "group": group, "seed": seed, "varies": varies} for r in rows])
                n += 1
    return n
