"""The report's view of ``--seeds auto``: the decision records ``sweep.sequential.rounds`` wrote to
``<store>/sequential/<experiment>.json``, each claim's decision keyed by its scorecard claim id
(``decisions``: the newest record wins), the interval an adjusted row shows (``interval``), and a
short section (the scorecard writes each claim's note)."""

from __future__ import annotations

import math
from typing import Any

from analysis.scorecard import SEQUENTIAL_NOTE as NOTE  # how a claim's note names its decision
from model.qk_init import DEFAULT_INIT

RECORD_DIR = "sequential"  # sweep.sequential.record.RECORD_DIR
#: The fields every claim of ``decisions`` carries (a record written before they existed: None).
FIELDS = ("id", "kind", "condition", "strengths", "init", "depth", "metric", "predicted", "outcome", "look", "n",
          "seeds", "lost", "p", "text", "experiment", "alpha", "family_size", "estimate", "mean", "sd", "boundary",
          "sided", "alpha_level", "ci_adj_low", "ci_adj_high", "scale", "test", "null", "decided_in", "level",
          "level_j")


def load_records(root: str) -> list[dict[str, Any]]:
    """Every decision record of the store at ``root`` (none: ``[]``; an unreadable one is skipped)."""
    from sweep.store import Store

    return list(Store(str(root)).read_json_files(RECORD_DIR).values())


def _designed(rec: dict) -> bool:
    """A record of the family-wise design (older ones tested each claim at α alone: not used)."""
    return isinstance(rec.get("design"), dict) and isinstance(rec.get("claims"), list)


def _id(c: dict, rec: dict) -> str | None:
    """A claim row's scorecard id: stored since record version 3; before, a paired claim at the
    condition's default strengths was its condition's ``interventions.<condition>.<metric>`` row."""
    if "id" in c:
        return c["id"]
    if c.get("strengths") not in ("{}", None):
        return None
    return f"interventions.{c['condition']}.{c['metric']}"


def decisions(records: list[dict], preset: str | None) -> dict[str, dict[str, Any]]:
    """Scorecard claim id (``interventions.<condition>.<metric>``, ``dose_response.<condition>.<metric>``,
    ``alignment.gap.L4``, …) -> its decision in the newest finished record of ``preset`` (by
    ``written_at``; a record still running is used only for claims no finished one has). Each dict
    has every key of ``FIELDS`` (None where a record predates it) and ``open`` (still running);
    ``level`` is the level α/j the claim's test faced (rejecting, or for a claim not decided the one
    it ended at), ``level_j`` its j (the record's ``level``).

    What an adjusted interval needs: ``estimate`` (the claim's scale; ``mean`` and ``sd`` on the
    tested scale, ``scale`` "fisher_z" for correlations) and ``n`` at the deciding look (the last
    look for a claim not decided), ``boundary`` (the |t| that applied at the claim's rejecting
    level, or the level it ended at; ``sided`` 1: one-sided, a claim on two statistics) and
    ``ci_adj_low`` / ``ci_adj_high``: mean ± boundary · sd / √n, on the claim's scale, which excludes
    the null exactly when the claim was decided (``interval``)."""
    mine = [r for r in records if _designed(r) and (preset is None or r.get("preset") == preset)]
    mine.sort(key=lambda r: (bool(r.get("finished")), str(r.get("written_at") or "")))
    out: dict[str, dict[str, Any]] = {}
    for rec in mine:  # oldest first: a newer record overwrites
        ours: dict[str, dict] = {}
        for c in rec["claims"]:
            cid = _id(c, rec)
            if cid is None:
                continue
            legacy = "id" not in c  # version 2: one row per (condition, metric) at the default init
            if not legacy or cid not in ours or (c.get("init") == DEFAULT_INIT and ours[cid].get("init") != DEFAULT_INIT):
                ours[cid] = c
        for cid, c in ours.items():
            j = c.get("level")  # the record's: j of the rejecting level α/j
            level = c.get("alpha_level") or (rec["alpha"] / j if j and rec.get("alpha") else None)
            out[cid] = {**dict.fromkeys(FIELDS), **c, "id": cid, "experiment": c.get("experiment") or rec.get("experiment"),
                        "alpha": rec.get("alpha"), "family_size": rec["design"].get("family_size"),
                        "written_at": rec.get("written_at"), "open": bool(c.get("open", not rec.get("finished"))),
                        "level": level, "level_j": j}
    return out


def interval(c: dict) -> tuple[float, float] | None:
    """A decision's adjusted interval (``decisions``): (low, high), ±inf where a bound is unbounded
    (a look without spread that crossed no boundary: the sign-flip set is the whole line); None
    without a look (a record before version 3, or a claim no look reached)."""
    if c.get("boundary") is None:
        return None
    lo, hi = c.get("ci_adj_low"), c.get("ci_adj_high")
    return (-math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))


def terminal_note(row: dict) -> str:
    """`` — --seeds auto: …`` for the terminal line of a measured row (``stats.json`` form) that a
    record decides; the terminal shows a measured row's other notes only in report.md."""
    if row["verdict"] == "not measured":  # its whole reason is printed already
        return ""
    return "".join(f" — {part}" for part in (row["reason"] or "").split("; ") if part.startswith(NOTE))


def _seeds(values: list | None) -> str:
    return ", ".join(map(str, values or [])) or "–"


def section_md(records: list[dict], preset: str | None) -> list[str]:
    """``## Seeds until decided``: each record's design, its claims and the run-epochs it used."""
    mine = [r for r in records if preset is None or r.get("preset") == preset]
    if not mine:
        return []
    lines = ["## Seeds until decided (`--seeds auto`)", ""]
    for rec in sorted(mine, key=lambda r: str(r.get("written_at") or "")):
        looks = rec.get("looks", [])
        if not _designed(rec):
            lines += [f"Experiment `{rec.get('experiment')}` was written before the family-wise design (each "
                      "claim tested at α alone): its decisions are not used.", ""]
            continue
        d = rec["design"]
        state = "finished" if rec.get("finished") else "still running"
        fixed = rec.get("fixed")
        cost = ""
        if fixed and "run_epochs_used" in rec:
            cost = (f" Run-epochs used: {rec['run_epochs_used']} against {fixed['run_epochs']} for the fixed design of "
                    f"the same power ({fixed['seeds']} seeds: 80 % power at δ* = {fixed['effect']:.2f} sd, level "
                    f"{fixed['level']:.4g}).")
        lines += [f"Experiment `{rec['experiment']}` ({state}, written {rec.get('written_at')}): {d['family_size']} "
                  f"claims, family-wise error ≤ {rec['alpha']:g} over all of them and all looks (group-sequential "
                  f"paired t-tests with Lan–DeMets Pocock-type spending, Holm-type α recycling; SPEC §8), looks at "
                  f"{', '.join(map(str, looks))} seeds; seeds in order {', '.join(map(str, d['seeds']))}.{cost}"
                  + (f" One family with experiment `{d['joint']['experiment']}`: a decision in either hands its α to "
                     "the open claims of both." if d.get("joint") else ""), "",
                  "| claim | predicted | decision | p | seeds used | seeds lost |",
                  "|---|---|---|---|---|---|"]
        for c in rec.get("claims", []):
            lines.append(f"| {_label(c, rec)} | {c['predicted']} | {c['text']} | {_p(c.get('p'))} | {_seeds(c.get('seeds'))} "
                         f"| {_seeds(c.get('lost'))} |")
        lines.append("")
    return lines


def _label(c: dict, rec: dict) -> str:
    """The claim's scorecard id, or its unit and metric when no scorecard row shows it."""
    cid = _id(c, rec)
    if cid and (c.get("init") in (None, DEFAULT_INIT) or "id" in c):
        return f"`{cid}`"
    strengths = "" if c.get("strengths") in ("{}", None) else f" {c['strengths']}"
    where = f" ({c['init']}, {c['depth']} layers)" if c.get("depth") is not None else ""
    return f"{c.get('condition')}{strengths}{where} {c.get('metric')}"


def _p(v: float | None) -> str:
    return "—" if v is None else (f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}")
