"""``--seeds auto``'s record, ``<store>/sequential/<experiment>.json``: the design stored at the start
(and the check that a rerun shares it), each round's runs, the runs lost, each claim's decision.
No Ray (SPEC §8; the report reads it in ``sweep.report.sequential``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from analysis.sequential import CALIBRATION_PATHS, PROCEDURE
from sweep.cli import UsageError
from sweep.sequential_state import Experiment, State, claim_text

#: Where the decision record of an experiment goes in the store (``sequential/<experiment>.json``).
RECORD_DIR = "sequential"
#: The record's layout (2: the design stored at the start, the family-wise procedure, lost seeds).
RECORD_VERSION = 2


def new_record(exp: Experiment, name: str) -> dict[str, Any]:
    """The record before round 1: the design, nothing decided."""
    return {"version": RECORD_VERSION, "experiment": name, "preset": exp.preset.name, "design": design_of(exp),
            "alpha": exp.design.alpha, "looks": list(exp.design.looks), "seeds": list(exp.seeds),
            "family_size": len(exp.claims), "bounds": [list(b) for b in exp.design.bounds], "finished": False,
            "rounds": [], "lost": {}, "claims": []}


def design_of(exp: Experiment) -> dict[str, Any]:
    """What a rerun must share with the experiment (``check_design``)."""
    d = exp.design
    return {"max_seeds": d.max_seeds, "alpha": d.alpha, "looks": list(d.looks), "procedure": PROCEDURE,
            "spending": "Lan–DeMets Pocock-type", "family_size": len(exp.claims),
            "family": [c.row() for c in exp.claims], "seeds": list(exp.seeds), "lost_limit": exp.lost_limit,
            "epochs": exp.preset.train.epochs, "steps_per_epoch": exp.preset.train.steps_per_epoch,
            "calibration_paths": CALIBRATION_PATHS}


def record_uri(store_uri: str, name: str) -> str:
    return f"{store_uri.rstrip('/')}/{RECORD_DIR}/{name}.json"


def read_record(store, name: str) -> dict[str, Any] | None:
    """The experiment's record, or None when there is none."""
    from pyarrow import fs as pafs

    path = f"{store.base}/{RECORD_DIR}/{name}.json"
    if store.fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with store.fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())


def put_record(store, name: str, record: dict[str, Any]) -> None:
    record = {**record, "written_at": datetime.now(UTC).isoformat(timespec="seconds")}
    store.put(f"{store.base}/{RECORD_DIR}/{name}.json", json.dumps(record, indent=1).encode())


def _flags(design: dict[str, Any]) -> str:
    return f"--max-seeds {design['max_seeds']} --alpha {design['alpha']:g}"


def check_design(record: dict[str, Any] | None, exp: Experiment, name: str, where: str) -> None:
    """Refuse (``UsageError``, exit 2) a rerun whose design differs from the one stored at the start."""
    if record is None:
        return
    new = json.loads(json.dumps(design_of(exp)))
    old = record.get("design")
    tail = "; a new design needs a new experiment: add --name NEW"
    if old is None:
        raise UsageError(f"--seeds auto: experiment {name} ({where}) was written before the design was stored "
                         f"with the experiment{tail}")
    checks = [
        ("max_seeds", f"--max-seeds {new['max_seeds']}", _flags(old)),
        ("alpha", f"--alpha {new['alpha']:g}", _flags(old)),
        ("family", f"the claims of --conditions/--strengths/--inits/--depths ({new['family_size']})",
         f"a family of {old.get('family_size')} claims: " + ", ".join(
             sorted({f"{c['condition']}{'' if c['strengths'] == '{}' else ' ' + c['strengths']}"
                     for c in old.get("family", [])}))),
        ("epochs", f"--epochs {new['epochs']}", f"--epochs {old.get('epochs')}"),
        ("steps_per_epoch", f"--steps-per-epoch {new['steps_per_epoch']}",
         f"--steps-per-epoch {old.get('steps_per_epoch')}"),
        ("seeds", "the preset's seeds", "seeds " + ", ".join(map(str, old.get("seeds", [])))),
        ("procedure", f"the {new['procedure']} procedure", f"the {old.get('procedure')} procedure"),
        ("lost_limit", "this version's replacement limit", f"a limit of {old.get('lost_limit')} lost seeds"),
    ]
    for key, now, then in checks:
        if old.get(key) != new[key]:
            raise UsageError(f"{now}: experiment {name} was designed with {then} ({where}){tail}")



def claim_rows(exp: Experiment, state: State, finished: bool) -> list[dict[str, Any]]:
    """One dict per claim: the unit, the prediction, the decision and the seeds it used."""
    rows = []
    for c, s in zip(exp.claims, state.claims, strict=True):
        u = state.units[c.unit]
        rows.append({**c.row(), "outcome": s.outcome or "undecided", "open": not finished and not s.level,
                     "look": s.look, "n": len(s.seeds), "n_looks": exp.design.n_looks, "seeds": list(s.seeds),
                     "lost": list(u.lost), "p": s.p, "level": s.level or None, "crossed_look": s.crossed,
                     "round": s.round, "text": claim_text(s, u, exp.design.n_looks, state.exhausted(c.unit), finished)})
    return rows
