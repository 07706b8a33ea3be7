"""The report's ``--seeds auto`` view: a note per scorecard claim and a section."""

from __future__ import annotations

import json

from sweep.report.cli import write_report
from sweep.synthetic import make_synthetic_store
from sweep.synthetic.tables import write_store

RECORD = {
    "experiment": "interventions-paper-auto", "preset": "paper", "alpha": 0.05, "looks": [3, 5, 7, 10],
    "nominal": [0.021, 0.013, 0.013, 0.016], "bounds": [6.8, 4.2, 3.5, 2.9],
    "seeds": [7, 37, 42, 105, 210, 1000, 1001, 1002, 1003, 1004], "run_epochs_used": 480, "run_epochs_fixed": 900,
    "claims": [
        {"condition": "freeze_q", "strengths": "{}", "init": "independent_xavier", "depth": 8,
         "metric": "attn_entropy", "predicted": "+", "outcome": "as predicted", "look": 1, "n": 3, "n_looks": 4,
         "p": 0.001, "text": "as predicted, decided at 3 seeds (look 1 of 4)"},
        {"condition": "freeze_k", "strengths": "{}", "init": "independent_xavier", "depth": 8,
         "metric": "logit_std", "predicted": "-", "outcome": "undecided", "look": None, "n": None, "n_looks": 4,
         "p": 0.2, "text": "undecided at 10"},
    ],
}


def test_scorecard_and_report_say_where_each_claim_was_decided(tmp_path, capsys):
    store = tmp_path / "store"
    write_store(make_synthetic_store(n_seeds=2, depths=(4,), checkpoints=False), store)
    (store / "sequential").mkdir()
    (store / "sequential" / "interventions-paper-auto.json").write_text(json.dumps(RECORD))
    s = write_report(str(store), str(tmp_path / "out"), figures=False)
    rows = {r["id"]: r for r in s["scorecard"]}
    assert rows["interventions.freeze_q.attn_entropy"]["reason"].endswith(
        "--seeds auto: as predicted, decided at 3 seeds (look 1 of 4)")
    assert "--seeds auto: undecided at 10" in rows["interventions.freeze_k.logit_std"]["reason"]
    assert "--seeds auto" not in (rows["interventions.freeze_k.qk_erank"]["reason"] or "")
    out = capsys.readouterr().out.splitlines()
    printed = {claim: next(line for line in out if f" {claim} vs matched none" in line)
               for claim in ("freeze_q: attn_entropy ↑", "freeze_k: logit_std ↓", "freeze_k: qk_erank ↑")}
    assert printed["freeze_q: attn_entropy ↑"].endswith(" — --seeds auto: as predicted, decided at 3 seeds (look 1 of 4)")
    assert printed["freeze_k: logit_std ↓"].endswith(" — --seeds auto: undecided at 10")
    assert "--seeds auto" not in printed["freeze_k: qk_erank ↑"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Seeds until decided (`--seeds auto`)" in md
    assert "| freeze_q | default | attn_entropy | + | as predicted, decided at 3 seeds (look 1 of 4) |" in md
    assert "Run-epochs used: 480 against 900" in md


def test_no_record_no_section(tmp_path):
    store = tmp_path / "store"
    write_store(make_synthetic_store(n_seeds=2, depths=(4,), checkpoints=False), store)
    s = write_report(str(store), str(tmp_path / "out"), figures=False)
    assert not any("--seeds auto" in (r["reason"] or "") for r in s["scorecard"])
    assert "Seeds until decided" not in (tmp_path / "out" / "report.md").read_text()
