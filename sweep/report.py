"""The reducer: read the store, compute SPEC §8, write stats.json, tables, figures and report.md.

    python -m sweep.report [--store runs/store] [--out runs/report] [--no-figures] [--preset NAME]
                           [--plugin MODULE ...]

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
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from analysis import scorecard as sc
from analysis import vocabulary as vocab
from analysis.categories import CATEGORIES
from analysis.compute import compute_all
from analysis.primitives import to_jsonable
from model.plugins import add_plugin_flag, preload
from sweep import tables as tb
from sweep.cli import DEFAULT_STORE, UsageError, parser, run_cli
from sweep.store import Store, StoreError, safe_name
from sweep.store.schema import TABLES

FIGURE_CAPTIONS = {
    "fig1_alignment": "Figure 1 — layer-mean Q/K alignment per init (mean ± sd over seeds), one panel per depth",
    "fig2_pr": "Figure 2 — layer-mean PR_Q and PR_K per init and depth (mean ± sd over seeds)",
    "fig3_bridge": "Figure 3 — mechanism bridge over uncoupled seed-averaged cells, with OLS lines",
    "figA_checkpoints": "Figure A — layer-mean PR_Q − PR_K against training progress per checkpoint series",
}
#: What a reader must know about the non-paper presets (SPEC §10).
PRESET_NOTES = {
    "demo": "The `demo` preset trains a small model (d_model 64) on the stdlib-docs corpus for a few "
    "epochs at **lr 1e-3** (10× the paper's 1e-4) so that it learns visibly in minutes; its "
    "numbers exercise the pipeline and are not comparable with the paper's.",
    "smoke": "The `smoke` preset is the smallest grid that exercises every code path (tests only, "
    "lr 1e-3, d_model 16, two epochs); its numbers carry no meaning.",
}
FIGURE_SECTION = {
    "fig1_alignment": "alignment",
    "fig2_pr": "slopes",
    "fig3_bridge": "bridge",
    "figA_checkpoints": "checkpoints",
}


# ----------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------


def load_tables(
    root: str | os.PathLike, skipped: list[dict] | None = None
) -> dict[str, pd.DataFrame]:
    """The store's three tables as DataFrames, each with its schema's columns (empty if absent).

    Reads through ``Store``, not a bare ``pandas.read_parquet``: that skips a
    corrupt file with a warning and does not count rows twice while a compaction
    is half done (SPEC §6). Each skipped file is appended to ``skipped`` as a
    ``skipped_file`` record, so the report can list it.
    """
    store = Store(str(root))
    out = {t: store.read(t) for t in TABLES}
    if skipped is not None:
        skipped.extend(skipped_file(store.base, path, err) for path, err in store.skipped)
    return out


#: The stats sections that rows of each sweep / table feed.
SWEEP_SECTIONS = {
    "baseline": ("alignment", "slopes", "layer_categories", "bridge"),
    "interventions": ("interventions",),
    "checkpoints": ("checkpoints",),
}


def skipped_file(base: str, path: str, error: str) -> dict:
    """What an unreadable store file may have held: ``{path, error, table, sweep, preset, sections}``.

    The run directory name is the run id (``sweep.preset.init.L<d>.s<seed>.<condition>``);
    when it does not parse, sweep and preset are None and every section is marked.
    """
    rel = path[len(base) :].lstrip("/") if path.startswith(base) else path
    parts = rel.split("/")
    table = parts[0] if parts and parts[0] in TABLES else None
    sweep = preset = None
    if table == "checkpoints":
        sections = SWEEP_SECTIONS["checkpoints"]
    else:
        bits = parts[1].split(".") if len(parts) > 2 else []
        if len(bits) >= 6 and bits[0] in SWEEP_SECTIONS:
            sweep, preset = bits[0], bits[1]
        sections = SWEEP_SECTIONS.get(sweep) or tuple(x for v in SWEEP_SECTIONS.values() for x in v)
    return {"path": path, "error": error, "table": table, "sweep": sweep, "preset": preset,
            "sections": list(sections)}


def unknown_names(tables: dict[str, pd.DataFrame]) -> dict[str, list[str]]:
    """Regime and condition names in the store that no registry knows (a plugin not loaded)."""
    runs = [t for t in (tables.get("layers"), tables.get("epochs")) if t is not None and not t.empty]
    seen = {c: [v for t in runs if c in t for v in t[c].unique()] for c in ("init", "intervention")}
    return vocab.unknown_names(seen["init"], seen["intervention"])


# ----------------------------------------------------------------------------
# prose: one sentence per table/figure, computed from the numbers
# ----------------------------------------------------------------------------


def _f(v, fmt=".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _p(v) -> str:
    return "n/a" if v is None else f"{v:.2g}"


def _sentence_alignment(s: dict) -> str:
    a = s["alignment"]
    fin = a["final"]
    ep = a["final_epoch"]
    eps = f"epoch {ep['min']}" if ep["min"] == ep["max"] else f"epochs {ep['min']}–{ep['max']}"
    parts = [
        f"{tb_label(i)} {_f(d['mean'])} ± {_f(d['sd'])} (n = {d['n']})" for i, d in fin.items()
    ]
    text = f"Final layer-mean alignment ({eps}): " + "; ".join(parts) + "."
    if a.get("welch_t") is not None:
        text += (
            f" Welch t = {a['welch_t']:.2f}, p = {_p(a['welch_p'])}, Hedges' g = {_f(a['hedges_g'], '.2f')}"
            f" ({' + '.join(map(tb_label, vocab.coupled_inits()))} n = {a['n_coupled']}"
            f" vs uncoupled n = {a['n_uncoupled']})."
        )
    gaps = a.get("gap_by_depth") or {}
    if gaps:
        text += (
            " Gap to the larger uncoupled mean: "
            + ", ".join(f"{_f(g)} at {d} layer{'' if d == '1' else 's'}" for d, g in gaps.items())
            + "."
        )
    return text


def tb_label(init: str) -> str:
    return vocab.init_label(init)


def _sentence_slopes(s: dict) -> str:
    sl = s["slopes"]
    bits = []
    for metric, verb, key in (
        ("pr_q_minus_pr_k", "pr_q − pr_k rises", "positive"),
        ("pr_k", "pr_k falls", "negative"),
        ("pr_q", "pr_q rises", "positive"),
    ):
        pooled = sl["pooled"][metric]
        groups = ", ".join(
            f"{g} {sl[g][metric][key]}/{sl[g][metric]['n']}"
            for g in ("uncoupled", "coupled")
            if sl[g][metric]["n"]
        )
        bits.append(f"{verb} in {pooled[key]} of {pooled['n']} seed-averaged traces ({groups})")
    return "; ".join(bits) + "."


def _sentence_categories(s: dict) -> str:
    lc = s["layer_categories"]
    cats = [c for c in CATEGORIES if c in lc]
    lo_h = min(
        cats, key=lambda c: lc[c]["attn_entropy"] if lc[c]["attn_entropy"] is not None else 1e9
    )
    lo_e = min(cats, key=lambda c: lc[c]["qk_erank"] if lc[c]["qk_erank"] is not None else 1e9)
    hi_q = max(cats, key=lambda c: lc[c]["pr_q"] if lc[c]["pr_q"] is not None else -1e9)
    return (
        f"The lowest final attention entropy is in the {lo_h} layers ({_f(lc[lo_h]['attn_entropy'])} nats, "
        f"top-1 {_f(lc[lo_h]['attn_top1'])}), the lowest QKᵀ effective rank in the {lo_e} layers "
        f"({_f(lc[lo_e]['qk_erank'], '.2f')}), and the largest PR_Q in the {hi_q} layers "
        f"({_f(lc[hi_q]['pr_q'], '.2f')} dims)."
    )


def _sentence_bridge(s: dict) -> str:
    b = s["bridge"]
    out = []
    for level, name in (
        ("seed_averaged", "uncoupled seed-averaged cells"),
        ("per_seed", "per-seed trajectories"),
    ):
        if level not in b:
            continue
        rs = []
        for pair, d in b[level].items():
            a, c = pair.split("__")
            rs.append(f"{a} vs {c} r = {_f(d['r'])} (p = {_p(d['p'])})")
        n = max(d["n"] for d in b[level].values())
        out.append(f"Over {n} {name}: " + "; ".join(rs) + ".")
    return " ".join(out)


def _sentence_interventions(s: dict) -> str:
    iv = s["interventions"]
    init = s.get("interventions_init")
    out = []
    for cond, e in iv.items():
        if cond == vocab.CONTROL:
            continue
        deltas = ", ".join(
            f"Δ{m} {e[m]['delta']:+.3g}"
            for m in ("attn_entropy", "logit_std", "qk_erank")
            if e[m]["delta"] is not None
        )
        if e.get("confidence") is not None:
            n = e.get("n_confidence", e["n_pairs"])
            k = round(e["confidence"] * n)
            conf = f"every predicted direction holds in {k} of {n} seeds (confidence {e['confidence']:.2f})"
        else:
            conf = "no predicted direction (no confidence score)"
        out.append(f"{vocab.condition_label(cond)}: {deltas or 'no paired deltas'}; {conf}.")
    return (f"Paired differences from the matched `{vocab.CONTROL}` run ({tb_label(init)}): "
            + " ".join(out))


def _sentence_checkpoints(s: dict) -> str:
    c = s["checkpoints"]
    return (
        f"The slope of layer-mean pr_q − pr_k on progress is positive in {c['positive_series']} of "
        f"{c['n_fitted_series']} series with ≥ 3 revisions; the pr_k → qk_erank → attn_entropy link "
        f"(both correlations positive) recurs in {c['link_recurs_series']} of them."
    ) + _sentence_duplicates(c)


def _sentence_duplicates(c: dict) -> str:
    dup = c.get("duplicate_revisions") or {}
    if not dup:
        return ""
    pairs = ", ".join(f"{rev} (= {orig})" for rev, orig in sorted(dup.items()))
    return (f" Left out of these fits: {len(dup)} revision(s) serving the same weights as another "
            f"revision of their series: {pairs}.")


# ----------------------------------------------------------------------------
# report.md
# ----------------------------------------------------------------------------


def _provenance_md(s: dict) -> list[str]:
    pv = s["provenance"]
    lines = ["## Data provenance", ""]
    if not pv["sweeps"]:
        lines.append("The store holds no baseline or intervention runs.")
    for sweep, d in pv["sweeps"].items():
        fe = d["final_epoch"]
        fe_txt = str(fe["min"]) if fe["min"] == fe["max"] else f"{fe['min']}–{fe['max']}"
        lines.append(
            f"- **{sweep}**: {d['n_runs']} runs, preset(s) {', '.join(d['presets'])}; inits "
            f"{', '.join(d['inits'])}; depths {', '.join(map(str, d['depths']))}; "
            f"seeds {', '.join(map(str, d['seeds']))}; "
            f"conditions {', '.join(d['interventions'])}; final epoch used "
            f"{fe_txt} (each run's last logged epoch)."
        )
    if pv["checkpoint_series"]:
        lines.append(
            f"- **checkpoints**: {len(pv['checkpoint_series'])} series "
            f"({', '.join(pv['checkpoint_series'])}), {pv['checkpoint_revisions']} ok revisions."
        )
    for preset in pv["presets"]:
        if preset in PRESET_NOTES:
            lines += ["", "> " + PRESET_NOTES[preset]]
        for note in (s.get("preset_notes") or {}).get(preset, []):
            lines += ["", f"> Preset `{preset}`: {note}"]
    if pv["excluded_runs"]:
        lines.append(
            f"- excluded: {', '.join(f'{r} ({why})' for r, why in pv['excluded_runs'].items())}"
        )
    for n in s.get("notes", []):
        lines.append(f"- note: {n}")
    unknown = s.get("unknown_names") or {}
    if any(unknown.values()):
        lines.append(
            "- unknown names (no registry entry: load the module that defines them with "
            "`--plugin MODULE`; shown by their raw names, in grey): "
            + "; ".join(f"{kind} {', '.join(names)}" for kind, names in unknown.items() if names)
        )
    return lines + [""]


def _table_md(name: str, frames: dict[str, pd.DataFrame], prefix: str = "") -> list[str]:
    if name not in frames:
        return []
    return [
        tb.to_markdown(frames[name]),
        "",
        f"(`{prefix}tables/{name}.csv`, `.md`, `.tex`)",
        "",
    ]


def _figure_md(name: str, figs: dict, prefix: str = "") -> list[str]:
    if name not in figs:
        return []
    return [
        f"![{FIGURE_CAPTIONS[name]}]({prefix}figures/{name}.png)",
        "",
        f"*{FIGURE_CAPTIONS[name]}.*",
        "",
    ]


def _scorecard_md(s: dict) -> list[str]:
    """The reproduction scorecard of one preset's stats (rows under ``s["scorecard"]``)."""
    rows = s.get("scorecard") or []
    preset = rows[0]["preset"] if rows else None
    title = "## Reproduction scorecard" + (f" — preset `{preset}`" if preset else "")
    paper = bool(s.get("provenance", {}).get("paper_scale"))
    lines = [title, ""]
    if preset and preset != "paper":
        lines += [f"Preset `{preset}` is not the paper's scale (WikiText-103, d_model 256, 45 epochs): "
                  "the verdicts test the *direction* of each claim here, not its size.", ""]
    return lines + sc.render_markdown(rows, paper_scale=paper) + [""]


def _skipped_md(skipped: list[dict]) -> list[str]:
    if not skipped:
        return []
    lines = ["## Skipped store files", "",
             f"{len(skipped)} store file(s) could not be read; their rows are absent from every statistic:", ""]
    for f in skipped:
        who = f"{f['sweep']}/{f['preset']}" if f["sweep"] else (f["table"] or "unknown")
        lines.append(f"- `{f['path']}` ({who}; sections {', '.join(f['sections'])}): {f['error']}")
    return lines + [""]


def render_markdown(
    s: dict, frames: dict[str, pd.DataFrame], figs: dict, prefix: str = "", scorecard: bool = True
) -> str:
    """report.md of one preset; ``prefix`` is prepended to table/figure paths."""
    lines = ["# qkgeom report: query expansion and key specialisation", ""]
    if scorecard:
        lines += _scorecard_md(s)
    lines += _skipped_md(s.get("skipped_files") or [])
    lines += _provenance_md(s)
    miss = s["missing"]

    def absent(section):
        return [f"*No data: {miss.get(section, 'not computed')}.*", ""]

    lines += ["## Table 3 — final Q/K alignment per initialisation", ""]
    if s.get("alignment"):
        lines += [_sentence_alignment(s), ""] + _table_md("table3_alignment", frames, prefix)
        lines += _table_md("table3_contrast", frames, prefix) + _figure_md("fig1_alignment", figs, prefix)
    else:
        lines += absent("alignment")

    lines += ["## Table 4 — slopes over seed-averaged traces", ""]
    if s.get("slopes") and "table4_slopes" in frames:
        lines += [_sentence_slopes(s), ""] + _table_md("table4_slopes", frames, prefix)
        lines += _figure_md("fig2_pr", figs, prefix)
    else:
        lines += absent("slopes")

    lines += ["## Layer categories (final epoch)", ""]
    if s.get("layer_categories"):
        lines += [_sentence_categories(s), ""] + _table_md("layer_categories", frames, prefix)
    else:
        lines += absent("layer_categories")

    lines += ["## Mechanism bridge (Figure 3)", ""]
    if s.get("bridge"):
        lines += (
            [_sentence_bridge(s), ""]
            + _table_md("bridge", frames, prefix)
            + _figure_md("fig3_bridge", figs, prefix)
        )
    else:
        lines += absent("bridge")

    lines += ["## Table 5 — interventions", ""]
    if s.get("interventions"):
        lines += [_sentence_interventions(s), ""]
        lines += _table_md("table5_interventions", frames, prefix) + _table_md("table5_deltas", frames, prefix)
    else:
        lines += absent("interventions")

    lines += ["## Appendix A — public checkpoint series", ""]
    if s.get("checkpoints"):
        lines += [_sentence_checkpoints(s), ""] + _table_md("appendixA_checkpoints", frames)
        lines += _figure_md("figA_checkpoints", figs, prefix)
    else:
        lines += absent("checkpoints")

    lines += ["## Paper reference values (SPEC §9)", ""]
    ref = frames.get("reference_comparison")
    if s["provenance"]["paper_scale"] and ref is not None:
        lines += [
            "The store holds the paper-scale grid (preset `paper`), so the paper's values are shown beside ours.",
            "",
        ] + _table_md("reference_comparison", frames, prefix)
    elif ref is not None:
        lines += [
            "The paper's values apply to paper scale (preset `paper`, WikiText-103, 45 epochs); this store "
            "does not hold that grid, so they are listed for orientation only:",
            "",
        ]
        lines += [
            f"- {q}: {tb._fmt(p)}" for q, p in zip(ref["quantity"], ref["paper"], strict=True)
        ]
        lines.append("")

    lines += ["## Missing", ""]
    if miss:
        lines += [f"- `{k}`: {v}" for k, v in miss.items()]
    else:
        lines.append("Nothing: every section had data.")
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# the whole
# ----------------------------------------------------------------------------


class PresetNotInStore(ValueError):
    """``--preset`` names a preset the store does not hold."""


def store_presets(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The presets of the runs in ``layers`` and ``epochs``, sorted."""
    found: set[str] = set()
    for name in ("layers", "epochs"):
        df = tables.get(name)
        if df is not None and not df.empty and "preset" in df:
            found |= set(df["preset"].dropna().astype(str).unique())
    return sorted(found)


def preset_notes(preset: str, provenance: dict) -> list[str]:
    """The ``note`` of a preset known to ``sweep.presets``, and a line when its runs end early.

    Empty for a preset the registry does not know (or when it cannot be imported).
    """
    try:
        from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
    except Exception:  # noqa: BLE001 - the report must not fail on the registry
        return []
    notes: list[str] = []
    for sweep, registry in (("baseline", BASELINE_PRESETS), ("interventions", INTERVENTION_PRESETS)):
        known = registry.get(preset)
        if known is None:
            continue
        if known.note and known.note not in notes:
            notes.append(known.note)
        ran = provenance.get("sweeps", {}).get(sweep)
        if ran and preset in ran["presets"] and ran["final_epoch"]["max"] is not None:
            if ran["final_epoch"]["max"] != known.epochs:
                notes.append(
                    f"its {sweep} runs end at epoch {ran['final_epoch']['max']}, while the preset "
                    f"defines {known.epochs} epochs (overridden with --epochs, or the sweep is unfinished)"
                )
    return notes


def _report_one(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool,
    preset: str | None,
    skipped: list[dict],
) -> tuple[dict, dict[str, pd.DataFrame], dict]:
    """Stats, tables, figures and scorecard of one preset (``None``: the store as it is)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    an = compute_all(tables, preset=preset)
    s = an.stats
    label = preset if preset is not None else (s["provenance"]["presets"] or [None])[0]
    s["unknown_names"] = unknown_names(tables)
    frames = tb.build_tables(s)
    if not s["provenance"]["paper_scale"]:
        # keep the comparison table honest: our numbers are not at paper scale
        frames["reference_comparison"] = frames["reference_comparison"].drop(columns="ours")
    for name, df in frames.items():
        tb.write_table(df, out / "tables", name)
    for name in tb.TABLE_NAMES:
        if name not in frames:
            sec = tb.TABLE_SECTION[name]
            s["missing"][f"tables.{name}"] = s["missing"].get(sec, f"no data for section {sec!r}")
    mine = [f for f in skipped if f["preset"] in (None, label)]
    touched = {sec for f in mine for sec in f["sections"]}
    s["skipped_files"] = mine
    s["preset_notes"] = {label: preset_notes(label, s["provenance"])} if label else {}
    s["scorecard"] = sc.build_scorecard(an, label, paper_scale=label == "paper", touched=touched)
    s["scorecard_method"] = sc.METHOD_NOTE
    s["timing_s"] = {"stats_and_tables": time.perf_counter() - t0}
    figs: dict = {}
    if figures:
        from sweep import figures as fg

        t1 = time.perf_counter()
        figs = fg.draw_all(an, out / "figures")
        s["timing_s"]["figures"] = time.perf_counter() - t1
        for name in fg.FIGURE_NAMES:
            if name not in figs:
                sec = FIGURE_SECTION[name]
                s["missing"][f"figures.{name}"] = s["missing"].get(
                    sec, f"no data for section {sec!r}"
                )
    s["outputs"] = {
        "tables": sorted(frames),
        "figures": sorted(figs),
        "report": "report.md",
    }
    return s, frames, figs


def _write(out: Path, s: dict, markdown: str) -> None:
    (out / "report.md").write_text(markdown)
    (out / "stats.json").write_text(json.dumps(to_jsonable(s), indent=2, allow_nan=False) + "\n")


def build_report(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool = True,
    preset: str | None = None,
    skipped_files: list[dict] | None = None,
) -> dict:
    """Compute every statistic and write ``out``/stats.json, tables/, figures/ and report.md.

    Presets are reported separately (see the module docstring); ``preset`` keeps one
    and raises ``PresetNotInStore`` when the store lacks it. ``skipped_files``: the
    records ``load_tables`` collected. Returns the stats dict (the content of stats.json).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    skipped = list(skipped_files or [])
    present = store_presets(tables)
    if preset is not None and preset not in present:
        raise PresetNotInStore(
            f"preset {preset!r} is not in the store; presets present: {', '.join(present) or 'none'}"
        )
    if preset is not None or len(present) <= 1:
        s, frames, figs = _report_one(tables, out, figures, preset, skipped)
        s["presets"] = [preset] if preset is not None else present
        s["skipped_files"] = skipped
        _write(out, s, render_markdown(s, frames, figs))
        return s

    # several presets: one report each, never pooled, and an index that holds them all
    by_preset: dict[str, dict] = {}
    head = [
        "# qkgeom report: query expansion and key specialisation",
        "",
        f"This store holds {len(present)} presets ({', '.join(f'`{p}`' for p in present)}). Each is "
        "reported on its own below and under `presets/<name>/`; no statistic pools runs of "
        "different presets.",
        "",
    ]
    parts: list[str] = []
    for name in present:
        sub = out / "presets" / safe_name(name)
        s_p, frames, figs = _report_one(tables, sub, figures, name, skipped)
        _write(sub, s_p, render_markdown(s_p, frames, figs))
        by_preset[name] = s_p
        head += _scorecard_md(s_p)
        body = render_markdown(s_p, frames, figs, prefix=f"presets/{safe_name(name)}/", scorecard=False)
        body_lines = [ln for ln in body.splitlines()[1:] if not ln.startswith("## Skipped store files")]
        parts += [f"## Preset `{name}`", ""] + [("#" + ln if ln.startswith("#") else ln) for ln in body_lines]
    s = {
        "presets": present,
        "by_preset": by_preset,
        "scorecard": [row for p in present for row in by_preset[p]["scorecard"]],
        "scorecard_method": sc.METHOD_NOTE,
        "skipped_files": skipped,
        "missing": {},
        "notes": [f"the store holds presets {', '.join(present)}: each is reported separately"],
        "outputs": {"report": "report.md", "presets": {p: f"presets/{safe_name(p)}/" for p in present}},
    }
    _write(out, s, "\n".join(head + _skipped_md(skipped) + parts) + "\n")
    return s


def headline(s: dict) -> list[str]:
    """3–5 one-line headline numbers."""
    lines = []
    a = s.get("alignment")
    if a:
        fin = a["final"]
        cpl = [i for i in vocab.coupled_inits() if i in fin]
        c = fin[cpl[0]]["mean"] if cpl else None
        unc = [fin[i]["mean"] for i in vocab.uncoupled_inits() if i in fin and fin[i]["mean"] is not None]
        lines.append(
            f"final alignment: {'/'.join(cpl) or 'coupled'} {_f(c)} vs uncoupled "
            f"{'/'.join(_f(u) for u in unc) or 'n/a'} (Welch p = {_p(a.get('welch_p'))}, g = {_f(a.get('hedges_g'), '.2f')})"
        )
    sl = s.get("slopes")
    if sl:
        d, k = sl["pooled"]["pr_q_minus_pr_k"], sl["pooled"]["pr_k"]
        lines.append(
            f"seed-averaged traces: pr_q − pr_k rises in {d['positive']}/{d['n']}, pr_k falls in {k['negative']}/{k['n']}"
        )
    b = s.get("bridge")
    if b and "seed_averaged" in b:
        rs = ", ".join(_f(v["r"]) for v in b["seed_averaged"].values())
        lines.append(f"bridge r (uncoupled seed-averaged): {rs}")
    iv = s.get("interventions")
    if iv:
        conf = ", ".join(
            f"{c} {_f(e['confidence'], '.2f')}"
            for c, e in iv.items()
            if e.get("confidence") is not None
        )
        lines.append(f"intervention confidence: {conf or 'n/a'}")
    c = s.get("checkpoints")
    if c:
        lines.append(
            f"checkpoint series with positive pr_q − pr_k slope: {c['positive_series']}/{c['n_fitted_series']}"
        )
    if not lines:
        lines.append("no statistics: the store holds no usable runs (see `missing` in report.md)")
    return lines[:5]


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
    return ap.parse_args(argv)


def output_target(out: str) -> Store | None:
    """None for a local folder; else the ``Store`` (file system) a URI names, checked writable."""
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
    store = Store(args.store)
    if not store.exists():
        raise UsageError(f"--store {args.store}: no store there (run a sweep first, or check the path)")
    target = output_target(args.out)
    skipped: list[dict] = []
    tables = load_tables(args.store, skipped)
    try:
        if target is None:
            out = Path(args.out.removeprefix("file://"))
            s = build_report(tables, out, figures=not args.no_figures, preset=args.preset,
                             skipped_files=skipped)
        else:
            with tempfile.TemporaryDirectory(prefix="qkgeom-report-") as tmp:
                s = build_report(tables, Path(tmp), figures=not args.no_figures, preset=args.preset,
                                 skipped_files=skipped)
                write_outputs(Path(tmp), target)
    except PresetNotInStore as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.out.rstrip('/')}/report.md")
    for name, one in (s.get("by_preset") or {None: s}).items():
        for line in headline(one):
            print("  " + (f"[{name}] " if name else "") + line)
    print_scorecard(s)
    return 0


def print_scorecard(s: dict) -> None:
    """The scorecard on stdout, one block per preset (what ``make demo`` ends with)."""
    rows = s.get("scorecard") or []
    for name in dict.fromkeys(r["preset"] for r in rows):
        mine = [r for r in rows if r["preset"] == name]
        counts = ", ".join(f"{v} {sum(r['verdict'] == v for r in mine)}" for v in sc.VERDICTS)
        print(f"\nreproduction scorecard, preset {name} ({counts}):")
        for line in sc.render_text(mine):
            print("  " + line)
    if s.get("skipped_files"):
        print(f"\n{len(s['skipped_files'])} unreadable store file(s) skipped: see report.md")


if __name__ == "__main__":
    raise SystemExit(main())
