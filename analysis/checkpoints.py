"""SPEC §8 checkpoints (the paper's Appendix A): per-revision means and slopes per series (the sets
of seeds are ``analysis.suites``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis import claims
from analysis.frames import group_slopes, minmax_progress
from analysis.primitives import OMIT_NONE, num, pearson, to_jsonable
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section
from analysis.suites import ORIGINAL
from metrics.columns import CHECKPOINT_SETTINGS


@dataclass
class SeriesFit:
    """One checkpoint series: its slope on progress (None with < 3 revisions) and the link check."""

    n_revisions: int
    slope_pr_q_minus_pr_k: float | None
    link_recurs: bool | None  # Pearson r > 0 for both (pr_k, qk_erank) and (qk_erank, attn_entropy)
    r_pr_k__qk_erank: float | None
    r_qk_erank__attn_entropy: float | None
    n_rows: int
    #: where its revisions came from: the Hub repos ("EleutherAI/pythia-70m"), or "local files"
    #: (a manifest ``path``; ``repo`` is null); "unknown" in stores without the ``repo`` column
    source: str = "unknown"
    public: bool = False  # every ok revision came from the Hub: the paper's claims are about these
    group: str | None = field(default=None, metadata=OMIT_NONE)  # its set of seeds (SPEC §7 "Sets")
    seed: str | None = field(default=None, metadata=OMIT_NONE)  # its seed in that set ("0": the original)

    @property
    def counted(self) -> bool:
        """A unit of the count claims: in no set, or its set's original (a set's other seeds are the same
        model again; their claims are the per-set rows)."""
        return self.seed is None or self.seed == ORIGINAL


@dataclass
class CheckpointsResult(Result):
    """Appendix A: per series fits and the counts over fitted series."""

    key = "checkpoints"
    series: dict[str, SeriesFit]
    positive_series: int
    n_fitted_series: int
    link_recurs_series: int
    failed_revisions: int | None = field(default=None, metadata=OMIT_NONE)
    duplicate_revisions: dict[str, str] | None = field(default=None, metadata=OMIT_NONE)  # "series@rev" -> original
    #: the probe settings of the ok rows (SPEC §7 "Probe settings"), one description per distinct set, with
    #: its series; None when no row records them (stores written before they were stored)
    probe_settings: list[str] | None = field(default=None, metadata=OMIT_NONE)


def checkpoint_revision_means(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Layer-means per (series, revision) of ok rows with ``progress`` in [0, 1].

    Progress is training tokens min–max scaled to [0, 1] within the series
    (SPEC §8): (tokens − min) / (max − min) over the series' ok revisions. A
    series without tokens on every revision uses steps the same way, and one
    with neither min–max scales the stored ``progress``. A series whose values
    are all equal (one revision) gets progress 1.
    """
    cols = ["series", "revision", "progress", "n_layers", "pr_q", "pr_k", "pr_q_minus_pr_k"]
    if checkpoints.empty:
        return pd.DataFrame(columns=cols)
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()].copy()
    if ck.empty:
        return pd.DataFrame(columns=cols)
    diff = ck["pr_q"].astype(float) - ck["pr_k"].astype(float)
    ck["pr_q_minus_pr_k"] = ck["pr_q_minus_pr_k"].astype(float).fillna(diff)
    g = ck.groupby(["series", "revision"], sort=True)
    out = g[["pr_q", "pr_k", "pr_q_minus_pr_k"]].mean()
    out["n_layers"] = g.size()
    for c in ("progress", "tokens", "step"):
        out[c] = g[c].max().astype(float)
    out = out.reset_index()
    out["progress"] = minmax_progress(out, "series", ("tokens", "step", "progress"))
    return out.sort_values(["series", "progress"]).reset_index(drop=True)


def compute_checkpoints(checkpoints: pd.DataFrame) -> Computed[CheckpointsResult]:
    """Appendix A: per series slope of layer-mean pr_q − pr_k on progress and the link check.

    ``checkpoints -> {series: {name: {n_revisions, slope_pr_q_minus_pr_k, link_recurs,
    r_pr_k__qk_erank, r_qk_erank__attn_entropy}}, positive_series, n_fitted_series,
    link_recurs_series}``; slopes need >= 3 ok revisions (else null), and the two
    counts are over fitted series only. link_recurs: Pearson r > 0 for both
    (pr_k, qk_erank) and (qk_erank, attn_entropy) across layers x revisions.
    """
    revs = checkpoint_revision_means(checkpoints)
    if revs.empty:
        return Computed(None, {"checkpoints": "no ok checkpoint rows in the store"})
    sl = group_slopes(revs, ["series"], ["pr_q_minus_pr_k"], x="progress").set_index("series")
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()]
    series: dict[str, SeriesFit] = {}
    for name, sub in ck.groupby("series", sort=True):
        n_rev = int(sub["revision"].nunique())
        slope = num(sl.loc[name, "pr_q_minus_pr_k_slope"]) if n_rev >= 3 else None
        r1 = pearson(sub["pr_k"], sub["qk_erank"])
        r2 = pearson(sub["qk_erank"], sub["attn_entropy"])
        link = None
        if r1["r"] is not None and r2["r"] is not None:
            link = bool(r1["r"] > 0 and r2["r"] > 0)
        repos = sub["repo"].dropna().astype(str).unique() if "repo" in sub else ()
        public = "repo" in sub and bool(sub["repo"].notna().all())
        source = ", ".join(sorted(repos)) if public else "local files" if "repo" in sub else "unknown"
        group = seed = None
        if "group" in sub and sub["group"].notna().any():
            group, seed = str(sub["group"].dropna().iloc[0]), str(sub["seed"].dropna().iloc[0])
        series[str(name)] = SeriesFit(n_rev, slope, link, r1["r"], r2["r"], int(len(sub)), source, public, group,
                                      seed)
    fitted = [s for s in series.values() if s.slope_pr_q_minus_pr_k is not None]
    out = CheckpointsResult(
        series,
        positive_series=sum(s.slope_pr_q_minus_pr_k > 0 for s in fitted),
        n_fitted_series=len(fitted),
        link_recurs_series=sum(bool(s.link_recurs) for s in fitted),
    )
    failed = checkpoints[checkpoints["status"] == "failed"]
    if not failed.empty:
        out.failed_revisions = int(failed[["series", "revision"]].drop_duplicates().shape[0])
    dup = checkpoints[checkpoints["status"].astype(str).str.startswith("duplicate_of:")]
    if not dup.empty:  # same weights as another revision (sweep.extension.integrity): not in the fits
        dup = dup.drop_duplicates(["series", "revision"])
        out.duplicate_revisions = {f"{r.series}@{r.revision}": r.status.split(":", 1)[1]
                                   for r in dup.itertuples()}
    out.probe_settings = probe_settings(ck)
    missing = {}
    if not fitted:
        missing["checkpoints.slopes"] = "no checkpoint series has >= 3 ok revisions"
    return Computed(out, missing, {"checkpoint_revisions": revs})


def probe_settings(ok: pd.DataFrame) -> list[str] | None:
    """One description of each distinct probe setting among ``ok`` rows, with the series probed so
    (``--n-seqs`` × ``--seq-len`` tokens, the probe text's sha256, transformers' version); rows without
    them are "not recorded". None when no row records them."""
    if not set(CHECKPOINT_SETTINGS) <= set(ok.columns) or ok[list(CHECKPOINT_SETTINGS)].isna().all().all():
        return None
    out: dict[str, list[str]] = {}
    for row in ok.drop_duplicates(["series", *CHECKPOINT_SETTINGS]).itertuples(index=False):
        n, t, sha, version = (getattr(row, c) for c in CHECKPOINT_SETTINGS)
        recorded = not any(pd.isna(v) for v in (n, t, sha, version))
        what = (f"{int(n)} sequences × {int(t)} tokens of a text with sha256 {str(sha)[:12]}…, transformers {version}"
                if recorded else "settings not recorded")
        series = out.setdefault(what, [])
        if row.series not in series:
            series.append(str(row.series))
    return [f"{what} ({', '.join(sorted(series))})" for what, series in out.items()]


def table(c: CheckpointsResult) -> pd.DataFrame | None:
    """Per checkpoint series: revisions, slope of pr_q − pr_k on progress, link check."""
    if not c.series:
        return None
    rows = [{"series": name, **to_jsonable(d)} for name, d in c.series.items()]
    cols = ["series", "source", "n_revisions", "slope_pr_q_minus_pr_k", "r_pr_k__qk_erank",
            "r_qk_erank__attn_entropy", "link_recurs"]
    return pd.DataFrame(rows)[cols]


def sentence(c: CheckpointsResult) -> str:
    """What was probed (public Hub series or local checkpoints), how many fitted series have a
    positive slope and where the link recurs; duplicates left out."""
    probed = "; ".join(f"{name} ({s.n_revisions} revisions, {'Hub: ' if s.public else ''}{s.source})"
                       for name, s in c.series.items())
    public = sum(s.public for s in c.series.values())
    text = f"Probed: {probed}. "
    if not public:
        text += ("None of these is one of the paper's public checkpoint series, so the scorecard leaves "
                 "the paper's Appendix A claims not measured; the fits below describe the probed series only. ")
    text += (
        f"The slope of layer-mean pr_q − pr_k on progress is positive in {c.positive_series} of "
        f"{c.n_fitted_series} series with ≥ 3 revisions; the pr_k → qk_erank → attn_entropy link "
        f"(both correlations positive) recurs in {c.link_recurs_series} of them."
    )
    if c.probe_settings and len(c.probe_settings) == 1:
        text += f" Probed with {c.probe_settings[0].rsplit(' (', 1)[0]}."
    elif c.probe_settings:
        text += (f" The rows were probed under {len(c.probe_settings)} different settings, whose values are not "
                 f"comparable: {'; '.join(c.probe_settings)}.")
    else:
        text += " The probe settings are not recorded (rows written before they were stored)."
    if c.duplicate_revisions:
        pairs = ", ".join(f"{rev} (= {orig})" for rev, orig in sorted(c.duplicate_revisions.items()))
        text += (f" Left out of these fits: {len(c.duplicate_revisions)} revision(s) serving the same "
                 f"weights as another revision of their series: {pairs}.")
    return text


class Checkpoints(Section[CheckpointsResult]):
    """The paper's Appendix A over the probed checkpoint series (public ones, or local ones such as
    the demo's tiny series: the prose says which)."""

    name = "checkpoints"
    heading = "Appendix A — checkpoint series"
    reads = ("checkpoints",)
    table_names = ("appendixA_checkpoints",)
    figures = (Figure("figA_checkpoints", "Figure A — layer-mean PR_Q − PR_K against training progress per "
                      "probed checkpoint series", "sweep.report.figures:figA_checkpoints"),)

    def compute(self, data: Inputs) -> Computed[CheckpointsResult]:
        return compute_checkpoints(data.checkpoints)

    def tables(self, result: CheckpointsResult) -> dict[str, pd.DataFrame | None]:
        return {"appendixA_checkpoints": table(result)}

    def prose(self, result: CheckpointsResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.checkpoint_claims(an)


SECTION = Checkpoints()
