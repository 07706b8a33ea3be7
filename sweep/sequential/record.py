"""``--seeds auto``'s record, ``<store>/sequential/<experiment>.json``: the design stored at the start
(and the checks that a rerun shares it and that no other experiment decides the same claims on the
same seeds), each round's runs, the runs lost, each claim's decision with what an interval that
agrees with it needs. No Ray (SPEC §8; the report reads it in ``sweep.report.sequential``)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from analysis.sequential import CALIBRATION_PATHS, PROCEDURE, LookStat
from sweep.cli import UsageError
from sweep.sequential.state import (
    ClaimState,
    Experiment,
    JointClaim,
    State,
    adjusted_interval,
    boundary,
    claim_text,
    row_key,
)

#: Where the decision record of an experiment goes in the store (``sequential/<experiment>.json``).
RECORD_DIR = "sequential"
#: The record's layout (2: the design stored at the start, the family-wise procedure, lost seeds;
#: 3: claims of every kind with their scorecard ids, look paths and adjusted intervals, joint families).
RECORD_VERSION = 3
#: How ``--seeds auto`` refuses a new design under an old name.
NEW_NAME = "a new design needs a new experiment: add --name NEW"


def new_record(exp: Experiment, name: str) -> dict[str, Any]:
    """The record before round 1: the design, nothing decided."""
    d = exp.design
    out = {"version": RECORD_VERSION, "experiment": name, "preset": exp.preset.name, "sweep": exp.preset.sweep,
           "design": design_of(exp), "alpha": d.alpha, "looks": list(d.looks), "seeds": list(exp.seeds),
           "family_size": exp.family_size, "bounds": [list(b) for b in d.bounds], "finished": False,
           "rounds": [], "lost": {}, "claims": []}
    if any(c.against for c in exp.claims) or (exp.joint and any(c.row.get("against") for c in exp.joint.claims)):
        out["upper_bounds"] = d.upper.tolist()
    return out


def design_of(exp: Experiment) -> dict[str, Any]:
    """What a rerun must share with the experiment (``check_design``)."""
    d = exp.design
    return {"max_seeds": d.max_seeds, "alpha": d.alpha, "looks": list(d.looks), "procedure": PROCEDURE,
            "spending": "Lan–DeMets Pocock-type", "family_size": exp.family_size,
            "family": [c.row() for c in exp.claims], "seeds": list(exp.seeds), "lost_limit": exp.lost_limit,
            "epochs": exp.preset.train.epochs, "steps_per_epoch": exp.preset.train.steps_per_epoch,
            "calibration_paths": CALIBRATION_PATHS, "joint": exp.joint.design() if exp.joint else None}


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


def read_records(store) -> dict[str, dict[str, Any]]:
    """Every readable record of the store, by file name (without ``.json``)."""
    return store.read_json_files(RECORD_DIR)


def put_record(store, name: str, record: dict[str, Any]) -> None:
    record = {**record, "written_at": datetime.now(UTC).isoformat(timespec="seconds")}
    store.put(f"{store.base}/{RECORD_DIR}/{name}.json", json.dumps(record, indent=1).encode())


def _flags(design: dict[str, Any]) -> str:
    return f"--max-seeds {design['max_seeds']} --alpha {design['alpha']:g}"


def _family(rows: list[dict]) -> list[tuple]:
    """A stored family as its claims' keys and predictions (a row's other fields may grow)."""
    return [(*row_key(r), r.get("predicted")) for r in rows]


def _joint_of(design: dict[str, Any]) -> tuple | None:
    j = design.get("joint")
    return None if not j else (j.get("experiment"), j.get("order"), tuple(_family(j.get("family", []))))


def check_design(record: dict[str, Any] | None, exp: Experiment, name: str, where: str, tail: str = NEW_NAME) -> None:
    """Refuse (``UsageError``, exit 2) a rerun whose design differs from the one stored at the start."""
    if record is None:
        return
    new = json.loads(json.dumps(design_of(exp)))
    old = record.get("design")
    tail = f"; {tail}"
    if old is None:
        raise UsageError(f"--seeds auto: experiment {name} ({where}) was written before the design was stored "
                         f"with the experiment{tail}")
    joint = new["joint"]
    checks = [
        ("max_seeds", f"--max-seeds {new['max_seeds']}", _flags(old), None),
        ("alpha", f"--alpha {new['alpha']:g}", _flags(old), None),
        ("joint", "one family with " + (f"experiment {joint['experiment']}" if joint else "no other experiment"),
         "one family with " + (f"experiment {old['joint']['experiment']} (sweep.demo --seeds auto)"
                               if old.get("joint") else "no other experiment (the sweep alone)"), _joint_of),
        ("family", f"the claims of --conditions/--strengths/--inits/--depths ({new['family_size']})",
         f"a family of {old.get('family_size')} claims: " + ", ".join(
             sorted({str(c.get('id') or c.get('condition')) for c in old.get("family", [])})),
         lambda d: (d.get("family_size"), _family(d.get("family", [])))),
        ("epochs", f"--epochs {new['epochs']}", f"--epochs {old.get('epochs')}", None),
        ("steps_per_epoch", f"--steps-per-epoch {new['steps_per_epoch']}",
         f"--steps-per-epoch {old.get('steps_per_epoch')}", None),
        ("seeds", "the preset's seeds", "seeds " + ", ".join(map(str, old.get("seeds", []))), None),
        ("procedure", f"the {new['procedure']} procedure", f"the {old.get('procedure')} procedure", None),
        ("lost_limit", "this version's replacement limit", f"a limit of {old.get('lost_limit')} lost seeds", None),
    ]
    for key, now, then, view in checks:
        same = view(old) == view(new) if view else old.get(key) == new[key]
        if not same:
            raise UsageError(f"{now}: experiment {name} was designed with {then} ({where}){tail}")


def check_overlap(records: dict[str, dict[str, Any]], exp: Experiment, name: str, folder: str) -> None:
    """Refuse (``UsageError``, exit 2) an experiment that would decide a claim another experiment of
    the store (another name) already decides on some of the same seeds: the scorecard keeps one
    decision per claim, and two designs on one seed sequence err more often than either's α
    (SPEC §8). Its joint partner decides other claims and is not an overlap."""
    mine = {c.key() for c in exp.claims}
    seeds = set(exp.seeds)
    for file, rec in sorted(records.items(), key=lambda kv: str(kv[1].get("written_at") or "")):
        other = rec.get("experiment") or file
        design = rec.get("design") if isinstance(rec.get("design"), dict) else {}
        if other == name or rec.get("preset") != exp.preset.name or rec.get("sweep", "interventions") != exp.preset.sweep:
            continue
        rows = design.get("family") or rec.get("claims") or []
        shared = [r for r in rows if row_key(r) in mine]
        common = sorted(seeds & set(design.get("seeds") or rec.get("seeds") or []), key=exp.seeds.index)
        if shared and common:
            how = (f"continue it with python -m sweep.demo --seeds auto (its sweeps are one family with "
                   f"experiment {design['joint'].get('experiment')})" if design.get("joint")
                   else f"continue it with --name {other}")
            what = ", ".join(sorted({str(r.get("id") or f"{r.get('condition')} {r.get('metric')}") for r in shared})[:3])
            more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
            raise UsageError(
                f"--seeds auto: experiment {name} would decide {len(shared)} claims ({what}{more}) that experiment "
                f"{other} ({folder}/{file}.json) already decides on the same seeds ({', '.join(map(str, common[:5]))}"
                f"{', …' if len(common) > 5 else ''}): one experiment's seeds are decided by one design; {how}, "
                "decide other claims (--conditions/--strengths/--inits/--depths), or use another --store")


def _stat(x: LookStat | None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"n": x.n, "mean": _num(x.mean), "sd": _num(x.sd), "t": _num(x.t), "p": _num(x.p),
            "zero_spread": x.zero_spread}


def _num(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def decision_fields(s: ClaimState, against: bool, sign: int, fisher: bool, exp: Experiment, r: int) -> dict[str, Any]:
    """What the scorecard needs of a decision: the look's estimate, sd and n, the boundary at the
    rejecting (or, undecided, the current) level, the interval mean ± boundary · sd / √n that
    excludes the null exactly when the claim is decided (null bound: unbounded), the look path."""
    design, m = exp.design, exp.family_size
    b = boundary(s, against, design, m, r)
    st = s.stats[s.look - 1] if s.look and s.look <= len(s.stats) else None
    a = s.against_stats[s.look - 1] if st is not None and s.against_stats else None
    ci = adjusted_interval(s, against, sign, b, fisher)
    j = s.level or max(1, m - r)
    keep = s.look if s.level else len(s.stats)  # a decided claim's path ends at its deciding look
    return {
        "estimate": _num(math.tanh(st.mean) if fisher and st is not None else (st.mean if st else math.nan)),
        "mean": _num(st.mean) if st else None, "sd": _num(st.sd) if st else None,
        "mean_against": _num(a.mean) if a else None, "sd_against": _num(a.sd) if a else None,
        "scale": "fisher_z" if fisher else "identity", "test": "against" if against else "t",
        "boundary": b, "sided": 1 if against else 2, "alpha_level": design.alpha / j,
        "ci_adj_low": _num(ci[0]) if ci else None, "ci_adj_high": _num(ci[1]) if ci else None,
        "path": [_stat(x) for x in s.stats[:keep]],
        "path_against": [_stat(x) for x in s.against_stats[:keep]] if s.against_stats else None,
    }


def claim_rows(exp: Experiment, state: State, finished: bool, name: str | None = None) -> list[dict[str, Any]]:
    """One dict per claim: the unit, the prediction, the decision, the seeds it used, and
    ``decision_fields``; then, when this experiment runs second in a joint family, the other
    experiment's claims as they stand after this one's decisions."""
    r = state.decided()
    rows = []
    for c, s in zip(exp.claims, state.claims, strict=True):
        u = state.units[c.unit]
        rows.append({**c.row(), "outcome": s.outcome or "undecided", "open": not finished and not s.level,
                     "look": s.look, "n": len(s.seeds), "n_looks": exp.design.n_looks, "seeds": list(s.seeds),
                     "lost": list(u.lost), "p": s.p, "level": s.level or None, "crossed_look": s.crossed,
                     "round": s.round, "note": s.note, "experiment": name, "decided_in": name if s.level else None,
                     "text": claim_text(s, u, exp.design.n_looks, state.exhausted(c.unit), finished),
                     **decision_fields(s, c.against, c.predicted, c.fisher, exp, r)})
    if exp.joint and not exp.joint.later:
        rows += [_joint_row(exp, c, s, finished, name, r) for c, s in zip(exp.joint.claims, state.joint, strict=True)]
    return rows


def _joint_row(exp: Experiment, c: JointClaim, s: ClaimState, finished: bool, name: str | None, r: int) -> dict:
    """A claim of the experiment that ran first, as it stands after this one's looks: decided there,
    decided here by the α this experiment's decisions handed on (``decided_in``), or undecided."""
    row = dict(c.row)
    sign = 1 if row.get("predicted") == "+" else -1
    fields = decision_fields(s, bool(row.get("against")), sign, bool(row.get("fisher")), exp, r)
    if s.decided_in == "here":
        n_looks = exp.design.n_looks
        row.update(outcome=s.outcome, look=s.look, n=len(s.seeds), seeds=list(s.seeds), p=s.p, level=s.level,
                   crossed_look=s.crossed, round=s.round, decided_in=name,
                   text=f"{s.outcome}, decided at {len(s.seeds)} seeds (look {s.look} of {n_looks}; by the α "
                        f"experiment {name}'s decisions handed on)")
    elif not s.level:
        row["open"] = not finished
    return {**row, **fields}


def stat_of(d: dict | None) -> LookStat | None:
    """A stored look statistic back as a ``LookStat`` (None stays None; null numbers are NaN)."""
    if d is None:
        return None
    f = lambda v: math.nan if v is None else float(v)  # noqa: E731
    return LookStat(int(d["n"]), f(d["mean"]), f(d["sd"]), f(d["t"]), f(d["p"]), bool(d.get("zero_spread")))


def joint_claims(record: dict[str, Any]) -> tuple[JointClaim, ...]:
    """The claims of a finished experiment that ran first in a joint family, with their look paths
    and levels, for the experiment that runs second."""
    out = []
    for row in record.get("claims", []):
        path = tuple(stat_of(x) for x in row.get("path") or [])
        against = row.get("path_against")
        out.append(JointClaim({k: v for k, v in row.items() if k not in ("path", "path_against")}, path,  # type: ignore[arg-type]
                              tuple(stat_of(x) for x in against) if against is not None else None,
                              int(row.get("level") or 0)))
    return tuple(out)
