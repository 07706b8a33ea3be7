"""Which demo schedule reaches the specialisation phase? (LOG.md, the demo schedule)

Trains the demo shape with the project's own ``Trainer`` (no Ray), one
process per run, and scores the SPEC §9 directions for every prefix of the
schedule: the first E epochs of an (epochs × steps) run *are* the E-epoch
run, so one long run answers every shorter schedule with the same steps per
epoch. Slopes are OLS over every logged epoch, epoch 0 included, per layer
(as the reducer fits them).

    python -m bench.demo_schedule --depths 2,3,4 --epochs 40 --steps 30 --jobs 2
    python -m bench.demo_schedule --depths 4 --conditions none,freeze_k --seeds 7,37

Prints per-run CPU seconds and, per prefix, the counts SPEC §10 sets the demo's schedule by.
This tunes only the schedule and shape; metrics and statistics are untouched.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd


def _one(job: dict) -> dict:
    import torch

    from interventions import make_intervention
    from model.corpus import load_corpus
    from sweep.presets import BASELINE_PRESETS

    torch.set_num_threads(1)
    base = BASELINE_PRESETS["demo"]
    from dataclasses import replace

    preset = replace(base, model=replace(base.model, d_model=job["d_model"], d_mlp=4 * job["d_model"]),
                     train=replace(base.train, epochs=job["epochs"], steps_per_epoch=job["steps"]))
    corpus = load_corpus(preset.corpus, None)
    from model.stack import Member
    from model.trainer import Trainer

    rows: list[dict] = []
    trainer = Trainer(preset.model_config(job["depth"], corpus.vocab_size),
                      [Member(job["init"], job["seed"], preset.train_config(job["seed"], "cpu"))], corpus,
                      lambda: make_intervention(job["condition"]))

    def on_epoch(_: int, r) -> None:
        for row in r.layers:
            rows.append({**{k: job[k] for k in ("init", "depth", "seed", "condition")}, "epoch": r.epoch,
                         "val_loss": r.run["val_loss"], **{k: row[k] for k in
                         ("layer", "pr_q", "pr_k", "qk_alignment", "attn_entropy", "logit_std", "qk_erank")}})

    c0 = time.process_time()
    trainer.run(on_epoch)
    return {"job": job, "cpu_s": time.process_time() - c0, "rows": rows}


def slopes(df: pd.DataFrame, upto: int) -> pd.DataFrame:
    """Per (init, depth, condition, layer): OLS slopes over seed-averaged epochs 0..upto."""
    d = df[df.epoch <= upto].copy()
    d["gap"] = d.pr_q - d.pr_k
    avg = d.groupby(["init", "depth", "condition", "layer", "epoch"], as_index=False)[["gap", "pr_k"]].mean()
    out = []
    for key, g in avg.groupby(["init", "depth", "condition", "layer"]):
        x = g.epoch.to_numpy(float)
        out.append((*key, np.polyfit(x, g.gap, 1)[0], np.polyfit(x, g.pr_k, 1)[0]))
    return pd.DataFrame(out, columns=["init", "depth", "condition", "layer", "gap_slope", "pr_k_slope"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.demo_schedule", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--depths", default="4")
    p.add_argument("--inits", default="independent_xavier,qk_identical,disjoint_support_xavier")
    p.add_argument("--conditions", default="none")
    p.add_argument("--seeds", default="37")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--every", type=int, default=5, help="report every this many epochs of prefix")
    p.add_argument("--out", default="runs/bench/demo_schedule.parquet")
    a = p.parse_args(argv)
    jobs = [dict(init=i, depth=int(d), seed=int(s), condition=c, epochs=a.epochs, steps=a.steps, d_model=a.d_model)
            for c in a.conditions.split(",") for i in a.inits.split(",") for d in a.depths.split(",")
            for s in a.seeds.split(",")]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as ex:
        results = list(ex.map(_one, jobs))
    wall = time.perf_counter() - t0
    for r in results:
        j = r["job"]
        print(f"{j['condition']:>22} {j['init']:>24} L{j['depth']} s{j['seed']}: {r['cpu_s']:.1f} CPU s")
    df = pd.DataFrame([row for r in results for row in r["rows"]])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(a.out)
    print(f"{len(jobs)} runs, {wall:.0f} s wall with {a.jobs} processes; rows in {a.out}")
    for upto in range(a.every, a.epochs + 1, a.every):
        s = slopes(df, upto)
        vl = df[df.epoch == upto].groupby("condition").val_loss.mean().round(3).to_dict()
        print(f"epochs 0..{upto:3d} ({upto * a.steps:5d} steps): gap slope>0 {int((s.gap_slope > 0).sum()):3d}/{len(s)}"
              f"  pr_k slope<0 {int((s.pr_k_slope < 0).sum()):3d}/{len(s)}  val_loss {json.dumps(vl)}")
        for depth, g in s.groupby("depth"):
            print(f"    L{depth}: gap>0 {int((g.gap_slope > 0).sum())}/{len(g)}  pr_k<0 {int((g.pr_k_slope < 0).sum())}/{len(g)}")
    final = df[df.epoch == df.epoch.max()].groupby(["condition"])[
        ["attn_entropy", "logit_std", "qk_erank", "pr_k", "qk_alignment"]].mean()
    print(final.round(3).to_string())


if __name__ == "__main__":
    main()
