"""The report's ``--seeds auto`` view: each claim's decision (the newest record wins), a note per
scorecard claim, and a section."""

from __future__ import annotations

import copy
import json

from sweep.report.cli import write_report
from sweep.report.sequential import FIELDS, decisions, section_md
from sweep.synthetic import make_synthetic_store
from sweep.synthetic.tables import write_store


def _claim(condition, metric, predicted, outcome, look, seeds, lost=(), text=None, p=0.001):
    return {"condition": condition, "strengths": "{}", "init": "independent_xavier", "depth": 8, "metric": metric,
            "predicted": predicted, "outcome": outcome, "open": False, "look": look, "n": len(seeds), "n_looks": 4,
            "seeds": list(seeds), "lost": list(lost), "p": p, "level": 10 if outcome != "undecided" else None,
            "crossed_look": look, "round": look, "text": text}


RECORD = {
    "version": 2, "experiment": "interventions-paper-auto", "preset": "paper", "alpha": 0.05,
    "looks": [3, 5, 7, 10], "seeds": [7, 37, 42, 105, 210, 1000, 1001, 1002, 1003, 1004], "family_size": 10,
    "design": {"max_seeds": 10, "alpha": 0.05, "looks": [3, 5, 7, 10], "procedure": "holm-group-sequential",
               "family_size": 10, "family": [], "seeds": [7, 37, 42, 105, 210, 1000, 1001, 1002, 1003, 1004],
               "lost_limit": 5, "epochs": 15, "steps_per_epoch": None},
    "finished": True, "written_at": "2026-12-06T10:00:00+00:00", "lost": {}, "rounds": [],
    "run_epochs_used": 480, "fixed": {"effect": 1.79, "level": 0.005, "power": 0.8, "seeds": 9, "runs": 60,
                                      "run_epochs": 900},
    "claims": [
        _claim("freeze_q", "attn_entropy", "+", "as predicted", 1, [7, 37, 42],
               text="as predicted, decided at 3 seeds (look 1 of 4)"),
        _claim("freeze_k", "logit_std", "-", "undecided", 2, [7, 42, 105, 210, 1000], lost=[37],
               text="undecided at 5 seeds (look 2 of 4; 1 seed lost: 37, no more replacements)", p=0.2),
    ],
}


def _store(tmp_path, *records):
    store = tmp_path / "store"
    write_store(make_synthetic_store(n_seeds=2, depths=(4,), checkpoints=False), store)
    (store / "sequential").mkdir()
    for i, rec in enumerate(records):
        (store / "sequential" / f"{rec['experiment']}-{i}.json").write_text(json.dumps(rec))
    return store


def test_scorecard_and_report_say_where_each_claim_was_decided(tmp_path, capsys):
    store = _store(tmp_path, RECORD)
    s = write_report(str(store), str(tmp_path / "out"), figures=False)
    rows = {r["id"]: r for r in s["scorecard"]}
    assert rows["interventions.freeze_q.attn_entropy"]["reason"].endswith(
        "--seeds auto: as predicted, decided at 3 seeds (look 1 of 4) (experiment interventions-paper-auto, "
        "family-wise α 0.05 over 10 claims)")
    assert "--seeds auto: undecided at 5 seeds (look 2 of 4; 1 seed lost: 37" in \
        rows["interventions.freeze_k.logit_std"]["reason"]
    assert "--seeds auto" not in (rows["interventions.freeze_k.qk_erank"]["reason"] or "")
    out = capsys.readouterr().out.splitlines()
    def under(claim: str) -> str:  # a row's table line and the ↳ notes below it
        i = next(i for i, line in enumerate(out) if line.startswith(f"  {claim} "))
        j = next((k for k in range(i + 1, len(out)) if not out[k].startswith("    ")), len(out))
        return "\n".join(out[i:j])

    assert "↳ --seeds auto: as predicted, decided at 3 seeds (look 1 of 4)" in under("freeze_q: attn_entropy ↑")
    assert "↳ --seeds auto: undecided at 5 seeds" in under("freeze_k: logit_std ↓")
    assert "--seeds auto" not in under("freeze_k: qk_erank ↑")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Seeds until decided (`--seeds auto`)" in md
    assert ("| `interventions.freeze_q.attn_entropy` | + | as predicted, decided at 3 seeds (look 1 of 4) | 0.001 | "
            "7, 37, 42 | – |" in md)
    assert "| 7, 42, 105, 210, 1000 | 37 |" in md
    assert "Run-epochs used: 480 against 900 for the fixed design of the same power (9 seeds" in md
    assert "10 claims, family-wise error ≤ 0.05 over all of them and all looks" in md


def test_the_newest_record_wins_not_the_last_by_path():
    newer = copy.deepcopy(RECORD)
    newer["experiment"], newer["written_at"] = "a-newer", "2026-12-07T09:00:00+00:00"
    newer["claims"][0].update(outcome="against the prediction", text="against the prediction, decided at 3 seeds")
    # "interventions-paper-auto" sorts after "a-newer" by path: the old rule would take it
    got = decisions([newer, RECORD], "paper")
    assert got["interventions.freeze_q.attn_entropy"]["experiment"] == "a-newer"
    assert got["interventions.freeze_q.attn_entropy"]["outcome"] == "against the prediction"
    assert got["interventions.freeze_k.logit_std"]["experiment"] == "a-newer"
    assert decisions([RECORD, newer], "paper") == got  # the order given does not matter
    claim = got["interventions.freeze_k.logit_std"]
    assert set(FIELDS) <= set(claim)
    assert (claim["n"], claim["seeds"], claim["lost"], claim["family_size"], claim["alpha"]) == \
        (5, [7, 42, 105, 210, 1000], [37], 10, 0.05)
    assert decisions([newer, RECORD], "demo") == {}


def test_a_running_record_fills_only_what_no_finished_record_decides():
    running = copy.deepcopy(RECORD)
    running.update(experiment="running", finished=False, written_at="2026-12-08T00:00:00+00:00")
    running["claims"] = [_claim("freeze_q", "attn_entropy", "+", "undecided", 1, [7, 37, 42], text="open at 3 seeds"),
                         _claim("freeze_k", "qk_erank", "+", "undecided", 1, [7, 37, 42], text="open at 3 seeds")]
    for c in running["claims"]:
        c["open"] = True
    got = decisions([RECORD, running], "paper")
    assert got["interventions.freeze_q.attn_entropy"]["experiment"] == "interventions-paper-auto"
    assert got["interventions.freeze_k.qk_erank"]["experiment"] == "running" and got["interventions.freeze_k.qk_erank"]["open"]


def test_records_before_the_family_wise_design_are_not_used():
    old = {k: v for k, v in RECORD.items() if k not in ("design", "written_at")}
    assert decisions([old], "paper") == {}
    assert "written before the family-wise design" in "\n".join(section_md([old], "paper"))


def test_strength_cells_and_other_inits_are_not_the_default_claim():
    rec = copy.deepcopy(RECORD)
    other = {**rec["claims"][0], "init": "qk_identical", "text": "other init"}
    swept = {**rec["claims"][0], "strengths": '{"lam": 0.2}', "text": "swept"}
    rec["claims"] = [other, swept, rec["claims"][0]]
    assert decisions([rec], "paper")["interventions.freeze_q.attn_entropy"]["init"] == "independent_xavier"


def test_no_record_no_section(tmp_path):
    store = tmp_path / "store"
    write_store(make_synthetic_store(n_seeds=2, depths=(4,), checkpoints=False), store)
    s = write_report(str(store), str(tmp_path / "out"), figures=False)
    assert not any("--seeds auto" in (r["reason"] or "") for r in s["scorecard"])
    assert "Seeds until decided" not in (tmp_path / "out" / "report.md").read_text()
