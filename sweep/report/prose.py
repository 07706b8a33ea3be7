"""The report's prose: one sentence per table or figure, and the headline, computed from the numbers."""



from __future__ import annotations

from analysis import vocabulary as vocab
from analysis.categories import CATEGORIES


def _f(v, fmt=".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _p(v) -> str:
    return "n/a" if v is None else f"{v:.2g}"


def sentence_alignment(s: dict) -> str:
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


def sentence_slopes(s: dict) -> str:
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


def sentence_categories(s: dict) -> str:
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


def sentence_bridge(s: dict) -> str:
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


def sentence_interventions(s: dict) -> str:
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


def sentence_checkpoints(s: dict) -> str:
    c = s["checkpoints"]
    return (
        f"The slope of layer-mean pr_q − pr_k on progress is positive in {c['positive_series']} of "
        f"{c['n_fitted_series']} series with ≥ 3 revisions; the pr_k → qk_erank → attn_entropy link "
        f"(both correlations positive) recurs in {c['link_recurs_series']} of them."
    ) + sentence_duplicates(c)


def sentence_duplicates(c: dict) -> str:
    dup = c.get("duplicate_revisions") or {}
    if not dup:
        return ""
    pairs = ", ".join(f"{rev} (= {orig})" for rev, orig in sorted(dup.items()))
    return (f" Left out of these fits: {len(dup)} revision(s) serving the same weights as another "
            f"revision of their series: {pairs}.")


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
