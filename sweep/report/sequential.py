"""The report's view of ``--seeds auto``: the decision records ``sweep.sequential`` wrote to
``<store>/sequential/<experiment>.json``, a note per scorecard claim, and a short section."""

from __future__ import annotations

import json
from typing import Any

RECORD_DIR = "sequential"  # sweep.sequential.RECORD_DIR (not imported: no Ray-side imports here)
#: How a claim's note names its decision.
NOTE = "--seeds auto: "


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


def _default_claims(records: list[dict], preset: str | None) -> dict[tuple[str, str], dict]:
    """(condition, metric) -> the claim at the condition's default strengths, newest record last."""
    out = {}
    for rec in records:
        if preset is not None and rec.get("preset") != preset:
            continue
        for c in rec.get("claims", []):
            if c.get("strengths") in ("{}", None):
                out[(c["condition"], c["metric"])] = {**c, "experiment": rec.get("experiment")}
    return out


def annotate(rows: list, records: list[dict], preset: str | None) -> None:
    """Add ``seeds auto: decided at n seeds (look k of K)`` / ``undecided at N`` to each intervention
    claim's note (``ScorecardRow.reason``) that a record of this preset decides."""
    claims = _default_claims(records, preset)
    for row in rows:
        parts = row.id.split(".")
        if len(parts) != 3 or parts[0] != "interventions" or (parts[1], parts[2]) not in claims:
            continue
        note = f"{NOTE}{claims[(parts[1], parts[2])]['text']}"
        row.reason = f"{row.reason}; {note}" if row.reason else note


def terminal_note(row: dict) -> str:
    """`` — --seeds auto: …`` for the terminal line of a measured row (``stats.json`` form) that a
    record decides; the terminal shows a measured row's other notes only in report.md."""
    if row["verdict"] == "not measured":  # its whole reason is printed already
        return ""
    return "".join(f" — {part}" for part in (row["reason"] or "").split("; ") if part.startswith(NOTE))


def section_md(records: list[dict], preset: str | None) -> list[str]:
    """``## Seeds until decided``: each record's design, its claims and the run-epochs it used."""
    mine = [r for r in records if preset is None or r.get("preset") == preset]
    if not mine:
        return []
    lines = ["## Seeds until decided (`--seeds auto`)", ""]
    for rec in mine:
        looks = rec["looks"]
        lines += [f"Experiment `{rec['experiment']}`: group-sequential paired t-test per claim (Lan–DeMets "
                  f"Pocock-type spending, α = {rec['alpha']:g} per claim over all looks; SPEC §8), looks at "
                  f"{', '.join(map(str, looks))} seeds; seeds in order {', '.join(map(str, rec['seeds']))}. "
                  f"Run-epochs used: {rec['run_epochs_used']} against {rec['run_epochs_fixed']} for a fixed "
                  f"design at {looks[-1]} seeds.", "",
                  "| condition | strengths | metric | predicted | decision |", "|---|---|---|---|---|"]
        for c in rec.get("claims", []):
            strengths = "default" if c["strengths"] in ("{}", None) else c["strengths"]
            lines.append(f"| {c['condition']} | {strengths} | {c['metric']} | {c['predicted']} | {c['text']} |")
        lines.append("")
    return lines
