"""SPEC §8 layer categories: early / mid / late layers' final geometry."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis import claims
from analysis.frames import baseline, final_rows, layer_category
from analysis.primitives import OMIT_NONE, fmt, num, to_jsonable
from analysis.section import Analysis, Computed, Inputs, Result, Section

CATEGORY_METRICS: tuple[str, ...] = ("attn_entropy", "attn_top1", "qk_erank", "pr_q")
CATEGORIES: tuple[str, ...] = ("early", "mid", "late")


@dataclass
class CategoryMeans:
    """Mean final metrics over the (run, layer) rows of one layer category, and their count."""

    attn_entropy: float | None
    attn_top1: float | None
    qk_erank: float | None
    pr_q: float | None
    n: int


@dataclass
class DepthCategories:
    """The categories at one depth, with the k = round(L/3) used (absent categories: None)."""

    k: int
    early: CategoryMeans | None = field(default=None, metadata=OMIT_NONE)
    mid: CategoryMeans | None = field(default=None, metadata=OMIT_NONE)
    late: CategoryMeans | None = field(default=None, metadata=OMIT_NONE)


#: The within-model contrasts: (the category above, the one below).
CONTRASTS: tuple[tuple[str, str], ...] = (("late", "mid"), ("early", "mid"))


@dataclass
class Contrast:
    """One metric's ``hi`` − ``lo`` contrast inside each model (SPEC §8): the mean over runs at each
    depth that has both categories, and their equal-weight mean over those depths."""

    by_depth: dict[str, float | None]
    mean: float | None
    n_runs: int


@dataclass
class CategoriesResult(Result):
    """Final geometry per layer category, over all depths and per depth, and the contrasts within models."""

    overall: dict[str, CategoryMeans]  # stats.json "layer_categories": category -> means (pooled: descriptive)
    by_depth: dict[str, DepthCategories]  # stats.json "layer_categories_by_depth"
    #: stats.json "layer_categories_within": "late_mid" / "early_mid" -> metric -> contrast
    within: dict[str, dict[str, Contrast]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"layer_categories": to_jsonable(self.overall),
                "layer_categories_by_depth": to_jsonable(self.by_depth),
                "layer_categories_within": to_jsonable(self.within)}


def contrasts(fin: pd.DataFrame) -> dict[str, dict[str, Contrast]]:
    """Each metric's contrasts within models (``CONTRASTS``), per depth and averaged over depths."""
    out: dict[str, dict[str, Contrast]] = {}
    for hi, lo in CONTRASTS:
        for m in CATEGORY_METRICS:
            g = fin.groupby(["run_id", "depth", "category"], observed=True)[m].mean().unstack("category")
            if hi not in g or lo not in g:
                continue
            run = (g[hi] - g[lo]).dropna()
            if run.empty:
                continue
            per_depth = run.groupby(level="depth").mean()
            out.setdefault(f"{hi}_{lo}", {})[m] = Contrast({str(int(d)): num(v) for d, v in per_depth.items()},
                                                           num(per_depth.mean()), int(len(run)))
    return out


def _means(means: pd.DataFrame, counts: pd.Series, at) -> CategoryMeans:
    return CategoryMeans(**{m: num(means.loc[at, m]) for m in CATEGORY_METRICS}, n=int(counts.loc[at]))


def compute_categories(layers: pd.DataFrame) -> Computed[CategoriesResult]:
    """Mean final attn_entropy, attn_top1, qk_erank, pr_q per layer category (baseline runs).

    The mean is over all final (run, layer) rows of the category; ``by_depth``
    repeats it per depth, with the k used.
    """
    fin = final_rows(baseline(layers))
    if fin.empty:
        return Computed(None, {"layer_categories": "no baseline runs in the store"})
    fin = fin.assign(category=layer_category(fin["layer"], fin["depth"]))
    g = fin.groupby("category")[list(CATEGORY_METRICS)]
    means, counts = g.mean(), g.size()
    overall = {}
    for c in CATEGORIES:
        if c in means.index:
            overall[c] = _means(means, counts, c)
    gd = fin.groupby(["depth", "category"])[list(CATEGORY_METRICS)]
    dmeans, dcounts = gd.mean(), gd.size()
    by_depth: dict[str, DepthCategories] = {}
    for d in sorted(fin["depth"].unique()):
        present = {c: _means(dmeans, dcounts, (d, c)) for c in CATEGORIES if (d, c) in dmeans.index}
        by_depth[str(int(d))] = DepthCategories(k=int(round(int(d) / 3)), **present)
    missing = {}
    absent = [c for c in CATEGORIES if c not in overall]
    if absent:
        missing["layer_categories." + "/".join(absent)] = (
            "no layers fall in this category at the depths present"
        )
    return Computed(CategoriesResult(overall, by_depth, contrasts(fin)), missing, {"final_layers": fin})


def table(lc: CategoriesResult) -> pd.DataFrame:
    """Mean final metrics per layer category, over all depths and per depth."""
    rows = []
    for cat, d in lc.overall.items():
        rows.append({"depth": "all", "k": None, "category": cat, **to_jsonable(d)})
    for depth, entry in lc.by_depth.items():
        for cat in CATEGORIES:
            if getattr(entry, cat) is not None:
                rows.append({"depth": depth, "k": entry.k, "category": cat, **to_jsonable(getattr(entry, cat))})
    df = pd.DataFrame(rows)
    return df[["depth", "k", "category", "n", *CATEGORY_METRICS]]


def contrast_table(lc: CategoriesResult) -> pd.DataFrame | None:
    """The contrasts within models: per pair and metric, each depth's mean over runs and the
    equal-weight mean over depths (the scorecard's statistic, averaged over seeds)."""
    rows = [{"contrast": pair.replace("_", " − "), "metric": m, "depth": d, "mean": v, "n_runs": c.n_runs}
            for pair, metrics in lc.within.items() for m, c in metrics.items()
            for d, v in [*c.by_depth.items(), ("equal-weight mean", c.mean)]]
    return pd.DataFrame(rows) if rows else None


def sentence(result: CategoriesResult) -> str:
    """The contrasts within models, then where the lowest entropy, the lowest QKᵀ rank and the
    largest PR_Q are in the rows pooled over depths (descriptive: a depth effect mixes into them)."""
    within = []
    for pair, metrics in result.within.items():
        hi, lo = pair.split("_")
        for m, c in metrics.items():
            depths = ", ".join(f"{d} layers {fmt(v)}" for d, v in c.by_depth.items())
            within.append(f"{m} {hi} − {lo} {fmt(c.mean)} ({depths})")
    head = ("Within each model (the layers of one run, then averaged over the depths that have both "
            "categories, each depth weighted equally; the scorecard tests these per seed): "
            + "; ".join(within) + ". ") if within else (
            "No model has layers of two categories (k = round(L/3): both need L >= 3); ")
    return head + "Pooled over depths (descriptive: each depth weighs by its layers in each category, so a depth " \
        "effect mixes in): " + _pooled(result)


def _pooled(result: CategoriesResult) -> str:
    lc = result.overall
    cats = [c for c in CATEGORIES if c in lc]
    lo_h = min(cats, key=lambda c: lc[c].attn_entropy if lc[c].attn_entropy is not None else 1e9)
    lo_e = min(cats, key=lambda c: lc[c].qk_erank if lc[c].qk_erank is not None else 1e9)
    hi_q = max(cats, key=lambda c: lc[c].pr_q if lc[c].pr_q is not None else -1e9)
    return (
        f"the lowest final attention entropy is in the {lo_h} layers ({fmt(lc[lo_h].attn_entropy)} nats, "
        f"top-1 {fmt(lc[lo_h].attn_top1)}), the lowest QKᵀ effective rank in the {lo_e} layers "
        f"({fmt(lc[lo_e].qk_erank, '.2f')}), and the largest PR_Q in the {hi_q} layers "
        f"({fmt(lc[hi_q].pr_q, '.2f')} dims)."
    )


class Categories(Section[CategoriesResult]):
    """SPEC §8 layer categories (early / mid / late)."""

    name = "layer_categories"
    heading = "Layer categories (final epoch)"
    reads = ("baseline",)
    table_names = ("layer_categories", "layer_category_contrasts")

    def compute(self, data: Inputs) -> Computed[CategoriesResult]:
        return compute_categories(data.layers)

    def tables(self, result: CategoriesResult) -> dict[str, pd.DataFrame | None]:
        return {"layer_categories": table(result), "layer_category_contrasts": contrast_table(result)}

    def prose(self, result: CategoriesResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.category_claims(an)


SECTION = Categories()
