"""The report's figures (matplotlib, Agg): PNG (dpi 150) and PDF.

Each function takes the ``analysis.compute.Analysis`` and an output directory,
draws one figure when it has data, and returns the written paths (empty
when there was nothing to draw). The sections name them (``Section.figures``,
``"sweep.report.figures:fig1_alignment"``); the writer draws what they name.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis import dose_response as dose  # noqa: E402
from analysis import vocabulary as vocab  # noqa: E402
from analysis.bridge import BRIDGE_PAIRS  # noqa: E402
from analysis.compute import Analysis  # noqa: E402
from analysis.frames import baseline, layer_mean_trajectories, ordered_inits  # noqa: E402
from analysis.primitives import fmt as pfmt  # noqa: E402

BRIDGE_LABELS: dict[str, str] = {
    "key_spec": "key specialisation\n−slope(PR$_K$)/mean(PR$_K$)  (1/epoch)",
    "qk_compression": "QK$^\\top$ compression\n−slope(erank)/mean(erank)  (1/epoch)",
    "entropy_sharpening": "entropy sharpening\n−slope(H)/mean(H)  (1/epoch)",
    "top1_sharpening": "top-1 sharpening\nslope(top-1)/mean(top-1)  (1/epoch)",
}
STYLE = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "figure.titlesize": 13,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def color(init: str) -> str:
    """The regime's registered colour (grey for a name no registry knows)."""
    return vocab.init_colour(init)


def label(init: str) -> str:
    """The regime's registered label (the raw name for a name no registry knows)."""
    return vocab.init_label(init)


def _save(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


def _band(ax, g: pd.DataFrame, col: str, init: str, linestyle="-", lab=None) -> None:
    """Mean line and ± sd band over seeds of a per-run layer-mean metric."""
    agg = g.groupby("epoch")[col].agg(["mean", "std", "count"]).reset_index()
    x = agg["epoch"].to_numpy(float)
    m = agg["mean"].to_numpy(float)
    s = agg["std"].fillna(0.0).to_numpy(float)
    ax.plot(x, m, color=color(init), linestyle=linestyle, lw=1.8, label=lab)
    ax.fill_between(x, m - s, m + s, color=color(init), alpha=0.18, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fig1_alignment(an: Analysis, out: Path) -> list[Path]:
    """Layer-mean |cos| alignment vs epoch per init (± sd over seeds), one panel per depth."""
    base = baseline(an.layers)
    if base.empty or base["qk_alignment"].notna().sum() == 0:
        return []
    traj = layer_mean_trajectories(base, ["qk_alignment"])
    depths = sorted(traj["depth"].unique())
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            1, len(depths), figsize=(4.6 * len(depths), 3.9), sharey=True, squeeze=False
        )
        for ax, d in zip(axes[0], depths, strict=True):
            sub = traj[traj["depth"] == d]
            for init in ordered_inits(sub["init"]):
                g = sub[sub["init"] == init]
                n = g["seed"].nunique()
                _band(ax, g, "qk_alignment", init, lab=f"{label(init)} (n={n})")
            ax.set_title(f"{d} layer{'' if d == 1 else 's'}")
            ax.set_xlabel("epoch")
        axes[0][0].set_ylabel("Q/K alignment, mean |cos| (layer mean)")
        axes[0][-1].legend(loc="best")
        fig.suptitle("Figure 1. Q/K alignment during training (mean ± sd over seeds)")
        fig.tight_layout()
        return _save(fig, out, "fig1_alignment")


def fig2_pr(an: Analysis, out: Path) -> list[Path]:
    """Layer-mean PR_Q and PR_K vs epoch per init, one row per depth (± sd over seeds)."""
    base = baseline(an.layers)
    if base.empty or base[["pr_q", "pr_k"]].notna().sum().sum() == 0:
        return []
    traj = layer_mean_trajectories(base, ["pr_q", "pr_k"])
    depths = sorted(traj["depth"].unique())
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            len(depths), 2, figsize=(10, 3.2 * len(depths) + 0.6), sharex=True, squeeze=False
        )
        for r, d in enumerate(depths):
            sub = traj[traj["depth"] == d]
            for c, (col, name) in enumerate((("pr_q", "PR$_Q$"), ("pr_k", "PR$_K$"))):
                ax = axes[r][c]
                for init in ordered_inits(sub["init"]):
                    _band(ax, sub[sub["init"] == init], col, init, lab=label(init))
                ax.set_title(f"{name}, {d} layer{'' if d == 1 else 's'}")
                ax.set_ylabel("participation ratio (dims)")
            for c in range(2):
                axes[-1][c].set_xlabel("epoch")
        axes[0][1].legend(loc="best")
        fig.suptitle("Figure 2. Query and key participation ratios (layer mean ± sd over seeds)")
        fig.tight_layout()
        return _save(fig, out, "fig2_pr")


def fig3_bridge(an: Analysis, out: Path) -> list[Path]:
    """Scatter of the three bridge pairs over uncoupled seed-averaged cells, with OLS lines."""
    pts = an.frames.get("seed_averaged")
    per_seed = an.frames.get("per_seed")
    if pts is None or pts.empty:
        return []
    bridge = an.results.get("bridge")
    stats = bridge.seed_averaged if bridge is not None else {}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), squeeze=False)
        for ax, (a, b) in zip(axes[0], BRIDGE_PAIRS, strict=True):
            if per_seed is not None and not per_seed.empty:
                ax.scatter(
                    per_seed[a],
                    per_seed[b],
                    s=10,
                    color="#bbbbbb",
                    alpha=0.6,
                    label="per seed",
                    zorder=1,
                )
            for init in ordered_inits(pts["init"]):
                g = pts[pts["init"] == init]
                ax.scatter(
                    g[a],
                    g[b],
                    s=30,
                    color=color(init),
                    edgecolor="k",
                    lw=0.4,
                    label=f"{label(init)} (seed mean)",
                    zorder=3,
                )
            ok = pts[[a, b]].dropna()
            if len(ok) >= 2 and ok[a].nunique() > 1:
                k, c0 = np.polyfit(ok[a].to_numpy(float), ok[b].to_numpy(float), 1)
                xs = np.linspace(ok[a].min(), ok[a].max(), 50)
                ax.plot(xs, k * xs + c0, color="k", lw=1.5, zorder=4, label="OLS fit")
            s = stats.get(f"{a}__{b}")
            r, p, n = (s.r, s.p, s.n) if s is not None else (None, None, len(ok))
            rtxt = "r undefined" if r is None else f"r = {r:.3f}, p = {p:.2g}"
            ax.set_title(f"{rtxt} (n = {n})")
            ax.set_xlabel(BRIDGE_LABELS[a])
            ax.set_ylabel(BRIDGE_LABELS[b])
            ax.ticklabel_format(axis="both", style="sci", scilimits=(-2, 3))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
        fig.suptitle("Figure 3. Mechanism bridge over uncoupled cells (relative slopes)")
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        return _save(fig, out, "fig3_bridge")


def figA_checkpoints(an: Analysis, out: Path) -> list[Path]:
    """Layer-mean PR_Q − PR_K vs training progress per checkpoint series."""
    revs = an.frames.get("checkpoint_revisions")
    if revs is None or revs.empty:
        return []
    series = sorted(revs["series"].unique())
    cmap = plt.get_cmap("tab10")
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        for i, s in enumerate(series):
            g = revs[revs["series"] == s].sort_values("progress")
            ax.plot(
                g["progress"],
                g["pr_q_minus_pr_k"],
                marker="o",
                lw=1.6,
                color=cmap(i % 10),
                label=f"{s} ({len(g)} rev.)",
            )
        ax.set_xlabel("training progress (tokens, min–max scaled per series)")
        ax.set_ylabel("PR$_Q$ − PR$_K$ (dims, layer mean)")
        ax.set_xlim(-0.02, 1.02)
        ax.legend(loc="best")
        ax.set_title("Figure A. Query–key participation gap across the probed checkpoint series")
        fig.tight_layout()
        return _save(fig, out, "figA_checkpoints")


def figA_sets(an: Analysis, out: Path) -> list[Path]:
    """One panel per set of seeds: each fitted seed's layer-mean PR_Q − PR_K against progress at the
    set's paired revisions (thin lines), the original series (seed "0") drawn apart (thick, black)."""
    revs = an.frames.get("checkpoint_set_revisions")
    if revs is None or revs.empty:
        return []
    sets = sorted(revs["group"].unique())
    ncol = min(3, len(sets))
    nrow = -(-len(sets) // ncol)
    cmap = plt.get_cmap("viridis")
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.9 * nrow), squeeze=False)
        for ax, name in zip(axes.flat, sets, strict=False):
            g = revs[revs["group"] == name]
            seeds = [x for x in dict.fromkeys(g["seed"]) if x != "0"]
            for i, seed in enumerate(seeds):
                one = g[g["seed"] == seed].sort_values("progress")
                ax.plot(one["progress"], one["pr_q_minus_pr_k"], lw=1.0, marker=".", alpha=0.8,
                        color=cmap(i / max(1, len(seeds) - 1) * 0.9), label=f"seed {seed}")
            orig = g[g["seed"] == "0"].sort_values("progress")
            if not orig.empty:
                ax.plot(orig["progress"], orig["pr_q_minus_pr_k"], lw=2.6, color="black", marker="o",
                        label=f"original: {orig['series'].iloc[0]}", zorder=5)
            n = g["seed"].nunique()
            ax.set_title(f"{name} ({n} seeds, {g['key'].nunique()} paired revisions)", fontsize=10)
            ax.set_xlabel("training progress (min–max scaled)")
            ax.set_ylabel("PR$_Q$ − PR$_K$ (layer mean)")
            ax.set_xlim(-0.02, 1.02)
            ax.legend(loc="best", fontsize=7, ncol=2)
        for ax in list(axes.flat)[len(sets):]:
            ax.set_visible(False)
        fig.suptitle("Figure A2. PR$_Q$ − PR$_K$ over training, every seed of each set")
        fig.tight_layout()
        return _save(fig, out, "figA_sets")


def fig_dose_response(an: Analysis, out: Path) -> list[Path]:
    """``fig_dose_response``: one row per swept condition, one panel per metric: Δ against the
    strength — seed mean (line), seed band (min–max, shaded), each seed (dots), Δ = 0 dashed, the
    default strength dotted."""
    d, deltas = an.results.get("dose_response"), an.frames.get("dose_response_deltas")
    if d is None or deltas is None or deltas.empty:
        return []
    ncol = max(len(c.metrics) for c in d.conditions)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(len(d.conditions), ncol, figsize=(4.2 * ncol, 3.6 * len(d.conditions)),
                                 squeeze=False)
        for row, c in zip(axes, d.conditions, strict=True):
            sub = deltas[deltas["condition"] == c.condition]
            for ax, m in zip(row, c.metrics, strict=False):
                x = np.array([p.strength for p in m.points])
                mean = np.array([np.nan if p.mean is None else p.mean for p in m.points])
                lo = np.array([np.nan if p.low is None else p.low for p in m.points])
                hi = np.array([np.nan if p.high is None else p.high for p in m.points])
                colour = {-1: "#1f77b4", 1: "#d62728"}.get(m.predicted, "#555555")
                ax.fill_between(x, lo, hi, color=colour, alpha=0.18, lw=0, label="seed band (min–max)")
                ax.plot(x, mean, color=colour, lw=1.8, marker="o", label="seed mean")
                ax.scatter(sub["strength"], sub[f"d_{m.metric}"], s=12, color="k", alpha=0.5, zorder=3,
                           label="one seed")
                ax.axhline(0, color="grey", lw=0.8, ls="--")
                if c.default is not None:
                    ax.axvline(c.default, color="grey", lw=0.8, ls=":", label=f"default {c.default:g}")
                ci = f" [{pfmt(m.ci_low, '.2g')}, {pfmt(m.ci_high, '.2g')}]" if m.ci_low is not None else ""
                ax.set_title(f"Δ{m.metric} (predicted {dose.ARROW[m.predicted]})\nρ = {pfmt(m.rho, '.2f')}; "
                             f"slope per seed {pfmt(m.slope, '.2g')}{ci}", fontsize=10)
                ax.set_xlabel(f"{c.condition}.{c.field}")
                ax.set_ylabel(f"Δ {m.metric} vs matched none")
            for ax in row[len(c.metrics):]:
                ax.set_visible(False)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
        fig.suptitle(f"Dose–response: effect against strength ({dose.CLAIM_OWNER})")
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return _save(fig, out, "fig_dose_response")


#: The scorecard figure's colour per verdict.
VERDICT_COLOURS = {"direction reproduced": "#1b7837", "direction reversed": "#c51b7d", "undecided": "#7f7f7f",
                   "cannot be decided": "#e08214", "direction found: positive": "#2166ac",
                   "direction found: negative": "#b2182b"}


def forest_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The scorecard figure's rows: the counted claims that were measured, in scorecard order; and
    those listed apart (sanity checks, not measured)."""
    counted = [r for r in rows if r["block"] == "counted" and r["verdict"] != "not measured"]
    return counted, [r for r in rows if r not in counted and r["block"] != "magnitude"]


def fig_scorecard(rows: list[dict], out: Path) -> list[Path]:
    """The scorecard as a forest plot: one row per counted claim, its standardized effect (the mean
    over seeds in sd units, on the test's scale) turned so that the paper's direction points right,
    with the adjusted interval its verdict rests on, a line at the null, coloured by verdict; the
    sanity checks and the claims not measured listed apart below. [] without a counted row."""
    counted, apart = forest_rows(rows)
    if not counted:
        return []
    h = 0.32 * len(counted) + 0.22 * len(apart) + 1.6
    fig, (ax, low) = plt.subplots(2, 1, figsize=(9.5, h), height_ratios=[0.32 * len(counted) + 0.8,
                                                                          0.22 * len(apart) + 0.4])
    ys = np.arange(len(counted))[::-1]
    finite = [abs(v) for r in counted for v in (r["effect"], r["effect_low"], r["effect_high"])
              if v is not None and np.isfinite(v)]
    edge = min(max([3.0, *finite]) * 1.3, 1e3)  # beyond it (an unbounded interval), bars run to the edge
    for y, r in zip(ys, counted, strict=True):
        turn = -1.0 if r["expected"].startswith("<") else 1.0
        c = VERDICT_COLOURS.get(r["verdict"], "#7f7f7f")
        lo = -edge if r["effect_low"] is None else r["effect_low"] * turn
        hi = edge if r["effect_high"] is None else r["effect_high"] * turn
        lo, hi = sorted((lo, hi))
        if r["effect"] is not None:
            ax.plot([max(lo, -edge), min(hi, edge)], [y, y], color=c, lw=2)
            e = float(np.clip(r["effect"] * turn, -edge, edge))
            ax.plot(e, y, "o", color=c, ms=6)
        else:
            why = ("no spread: every unit " + f"{r['value']:.3g}" if r.get("no_spread") else
                   "no standardized effect (binomial over series)" if r["unit"] == "series" else "one unit: no interval")
            ax.text(-edge * 0.97, y, f"{why} — {r['verdict']}", va="center", ha="left", fontsize=8, color=c)
    ax.set_xscale("symlog", linthresh=1.0)  # effects of 0.5 and of 30 sd on one axis
    ax.axvline(0, color="black", lw=1)
    ax.set_yticks(ys, [f"{r['short']}  ({r['n']})" for r in counted], fontsize=8)
    ax.set_xlim(-edge, edge)
    ax.set_xlabel("standardized effect (mean / sd over units, symlog), paper's direction →; bars: adjusted interval",
                  fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", lw=2, label=v) for v, c in VERDICT_COLOURS.items()
               if any(r["verdict"] == v for r in counted)]
    ax.set_title("Reproduction scorecard: one row per counted claim (units in brackets)")
    low.axis("off")
    low.legend(handles=handles, loc="upper right", fontsize=8, title="verdict", title_fontsize=8)
    text = [f"{r['short']}: {r['verdict']}" for r in apart]
    low.text(0, 1, "Not in the family (sanity checks, not measured):\n" + "\n".join(text), va="top", fontsize=8,
             transform=low.transAxes)
    fig.tight_layout()
    return _save(fig, out, "scorecard")
