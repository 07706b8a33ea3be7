"""``python -m sweep.replay TRIAL_DIR``: a Tune trial in the foreground, without Ray.

Reads the run spec from the trial's ``params.json`` (what Tune handed the trainable:
``{"spec": TrialSpec.to_config()}``), builds the same ``model.trainer.Trainer`` the trial built,
with the trial's options (AMP, CUDA graphs, TF32, torch threads, compile) unless a flag says
otherwise, and trains it here, writing each epoch's rows to ``--store`` as the trial did: for
``--pack 1`` the values the trial wrote (on the same device). No checkpoint is read: it starts
from epoch 0. For a trial that misbehaves on a GPU: ``--no-graphs``, ``--amp off`` and a debugger
are then at hand. Ray is not started (``sweep.trial.trainable``'s row writer is reused: it only imports Ray).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model.flags import add_precision_flags

PARAMS = "params.json"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sweep.replay", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("trial_dir", help="a Tune trial's folder (holding params.json), under --storage/<name>/")
    p.add_argument("--store", default="runs/replay/store", help="Parquet store the rows go to (a path or URI)")
    p.add_argument("--corpus", help="the sweep's corpus when it was not its preset's (wikitext103, stdlib-docs "
                   "or a text file; default: the preset's)")
    p.add_argument("--data-dir", help="folder holding wiki.train.raw (wikitext103)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    add_precision_flags(p)
    p.set_defaults(amp=None, graphs=None, tf32=None)  # None: the trial's own
    return p.parse_args(argv)


def read_config(trial_dir: str) -> dict:
    """The trial's Tune config (``params.json``); ValueError naming the folder when it is not one."""
    path = Path(trial_dir) / PARAMS
    if not path.is_file():
        raise ValueError(f"{trial_dir}: no {PARAMS} here; give a Tune trial's folder "
                         "(--storage/<name>/<trial>/)")
    config = json.loads(path.read_text())
    if "spec" not in config:
        raise ValueError(f"{path}: not a qkgeom trial config (no 'spec'); older experiments cannot be replayed")
    return config


def _corpus(config: dict, name: str | None, data_dir: str | None):
    from sweep.driver.runner import prepare_corpus
    from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS

    run = config["spec"]["runs"][0]
    presets = BASELINE_PRESETS if run["sweep"] == "baseline" else INTERVENTION_PRESETS
    if run["preset"] not in presets:
        raise ValueError(f"preset {run['preset']!r} of sweep {run['sweep']!r} is not known here")
    preset = presets[run["preset"]]
    context = config["spec"]["model"]["context"]
    from dataclasses import replace

    preset = replace(preset, corpus=name or preset.corpus, data_dir=data_dir if name or data_dir else preset.data_dir,
                     model=replace(preset.model, context=context))
    return prepare_corpus(preset)


def replay(config: dict, store_uri: str, corpus, device: str = "auto", amp: str | None = None,
           graphs: bool | None = None, tf32: bool | None = None) -> list[str]:
    """Train the trial's spec here, each member's rows to ``store_uri``; the members' final statuses."""
    from dataclasses import replace

    import torch

    from interventions import make_intervention
    from model.recipe import resolve_device, set_tf32
    from model.stack import Member
    from model.trainer import Trainer
    from sweep.store import Store
    from sweep.trial.spec import decode, plugins_of
    from sweep.trial.trainable import write_rows

    plugins_of(config).load()
    spec = decode(config, corpus.vocab_size)
    opts = spec.options
    spec = replace(spec, options=replace(opts, amp=opts.amp if amp is None else amp,
                                         graphs=opts.graphs if graphs is None else graphs,
                                         tf32=opts.tf32 if tf32 is None else tf32))
    torch.set_num_threads(max(1, int(spec.options.cpus_per_trial)))
    dev = resolve_device(device)
    set_tf32(spec.options.tf32, dev)
    trainer = Trainer(spec.model, [Member(r.init, r.seed, spec.run_train(r, str(dev))) for r in spec.runs], corpus,
                      lambda: make_intervention(spec.condition, **dict(spec.strengths)), graphs=spec.options.graphs)
    store = Store(store_uri)

    def on_epoch(i: int, report) -> None:
        write_rows(store, spec.runs[i], report)
        run = report.run
        print(f"{spec.runs[i].run_id} epoch {report.epoch:3d}  train {run['train_loss']}  val {run['val_loss']}  "
              f"{run['status']}", flush=True)

    return trainer.run(on_epoch)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        config = read_config(args.trial_dir)
        corpus = _corpus(config, args.corpus, args.data_dir)
    except (ValueError, OSError) as exc:
        print(f"python -m sweep.replay: error: {exc}", file=sys.stderr)
        return 2
    statuses = replay(config, args.store, corpus, args.device, args.amp, args.graphs, args.tf32)
    print(f"replayed {len(statuses)} run{'s' if len(statuses) > 1 else ''}: {', '.join(statuses)}; rows in {args.store}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
