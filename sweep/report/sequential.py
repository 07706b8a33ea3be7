"""The report's view of ``--seeds auto``: the decision records ``sweep.sequential`` wrote to
``<store>/sequential/<experiment>.json``, each claim's decision (``decisions``: the newest record
wins), and a short section (the scorecard writes each claim's note)."""

from __future__ import annotations

import json
from typing import Any

from analysis.scorecard import SEQUENTIAL_NOTE as NOTE  # how a claim's note names its decision
from model.qk_init import DEFAULT_INIT

RECORD_DIR = "sequential"  # sweep.sequential_record.RECORD_DIR
#: The fields every claim of ``decisions`` carries.
FIELDS = ("condition", "strengths", "init", "depth", "metric", "predicted", "outcome", "look", "n", "seeds", "lost",
          "p", "text", "experiment", "alpha", "family_size")


def load_records(root: str) -> list[dict[str, Any]]:
    """Every decision record of the store at ``root`` (none: ``[]``; an unreadable one is skipped)."""
    from pyarrow import fs as pafs

    from sweep.store import Store

    store = Store(str(root))
    out = []
    infos = store.fs.get_file_info(pafs.FileSelector(f"{store.base}/{RECORD_DIR}", allow_not_found=True))
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            with store.fs.open_input_stream(info.path) as f:
                out.append(json.loads(f.read().decode()))
        except (OSError, ValueError):
            continue
    return out


def _designed(rec: dict) -> bool:
    """A record of the family-wise design (older ones tested each claim at α alone: not used)."""
    return isinstance(rec.get("design"), dict) and isinstance(rec.get("claims"), list)


def decisions(records: list[dict], preset: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    """(condition, metric) -> the claim at the condition's default strengths of the newest finished
    record of ``preset`` (by ``written_at``; a record still running is used only for claims no
    finished one has). One init and depth per claim: ``DEFAULT_INIT``'s when the record has several,
    else the first. Each dict has at least ``FIELDS`` and ``open`` (the experiment still runs)."""
    mine = [r for r in records if _designed(r) and (preset is None or r.get("preset") == preset)]
    mine.sort(key=lambda r: (bool(r.get("finished")), str(r.get("written_at") or "")))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in mine:  # oldest first: a newer record overwrites
        ours: dict[tuple[str, str], dict] = {}
        for c in rec["claims"]:
            if c.get("strengths") not in ("{}", None):
                continue
            key = (c["condition"], c["metric"])
            if key not in ours or (c.get("init") == DEFAULT_INIT and ours[key].get("init") != DEFAULT_INIT):
                ours[key] = c
        for key, c in ours.items():
            out[key] = {**c, "experiment": rec.get("experiment"), "alpha": rec.get("alpha"),
                        "family_size": rec["design"].get("family_size"), "written_at": rec.get("written_at"),
                        "open": bool(c.get("open", not rec.get("finished")))}
    return out


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
                  f"{', '.join(map(str, looks))} seeds; seeds in order {', '.join(map(str, d['seeds']))}.{cost}", "",
                  "| condition | strengths | metric | predicted | decision | seeds used | seeds lost |",
                  "|---|---|---|---|---|---|---|"]
        for c in rec.get("claims", []):
            strengths = "default" if c["strengths"] in ("{}", None) else c["strengths"]
            lines.append(f"| {c['condition']} | {strengths} | {c['metric']} | {c['predicted']} | {c['text']} | "
                         f"{_seeds(c.get('seeds'))} | {_seeds(c.get('lost'))} |")
        lines.append("")
    return lines
