"""The headline printed after a report: 3–5 lines computed from stats.json.

Each section's own sentences are its ``Section.prose`` (in its module under ``analysis/``).
"""

from __future__ import annotations

from analysis import vocabulary as vocab


def _f(v, fmt=".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _p(v) -> str:
    return "n/a" if v is None else f"{v:.2g}"


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
            f"{'/'.join(_f(u) for u in unc) or 'n/a'} (Welch p = {_p(a.get('welch_p'))}, g = {_f(a.get('hedges_g'), '.2f')}; "
            "runs as units, the paper's statistic: descriptive, the scorecard tests over seeds)"
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
        lines.append(f"intervention confidence (the paper's score: seeds with every predicted direction, "
                     f"descriptive): {conf or 'n/a'}")
    c = s.get("checkpoints")
    if c:
        lines.append(
            f"checkpoint series with positive pr_q − pr_k slope: {c['positive_series']}/{c['n_fitted_series']}"
        )
    if not lines:
        lines.append("no statistics: the store holds no usable runs (see `missing` in report.md)")
    return lines[:5]
