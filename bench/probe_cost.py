"""Benchmark 2: the cost of the per-epoch probe and validation, in training steps.

    python -m bench.probe_cost [--depths 4,8] [--rounds 2] [--threads 1] [--device cpu|cuda] [--quick|--tiny]

At the paper size (d_model 256, 4 heads, d_mlp 1024, context 128, vocabulary
1758) a Trainer is built and, in one process, alternated (``bench.common.alternate``):
one training step (``Trainer.train_epoch()`` with ``steps_per_epoch=1``, batch
64 × 128; on a GPU a round of several steps, divided), ``probe_layers(model,
probe_x)`` on the Trainer's own probe batch (16 × 128 validation windows) with
its float64 SVDs on the CPU (``decomp_device="cpu"``) and on the model's device
(``"same"``), the probe's forward pass alone (``probe_inputs``) and ``val_loss()``
(8 validation batches of 64 × 128). Today's per-layer probe before issue 27
(``tests/probe_helpers.py``, "old") is timed in ``old_rounds`` rounds of its own
beside the step, and every new row is checked against its rows (largest relative
difference printed). Each figure is median(seconds) / median(step).

Issue 27's target: at paper width and depth 8, the probe (with its SVDs where
``decomp_device="auto"`` puts them) plus validation ≤ 5 training steps on the GPU.
The ratio printed last is that sum, in steps, at the worst depth.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import torch

from bench.common import alternate, bench_corpus, fmt_s, machine, med, print_ratio, set_threads
from bench.train_step import SIZES, make_trainer, model_config
from metrics.probe import decomposition_device, probe_inputs, probe_layers

#: Today's per-layer probe, kept verbatim for the tests; absent outside a checkout.
OLD_PROBE = Path(__file__).resolve().parents[1] / "tests" / "probe_helpers.py"
TARGET_STEPS = 5.0


def old_probe_layers() -> Any | None:
    """``old_probe_layers`` of tests/probe_helpers.py, or None when the file is not there."""
    if not OLD_PROBE.exists():
        return None
    spec = importlib.util.spec_from_file_location("qkgeom_old_probe", OLD_PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.old_probe_layers


def max_rel_diff(new: list[dict], old: list[dict]) -> float:
    """Largest |new − old| / max(|old|, 1e-12) over every value of every row (NaN pairs skipped)."""
    worst = 0.0
    for n, o in zip(new, old, strict=True):
        for col, want in o.items():
            for g, w in zip(*(v if isinstance(v, list) else [v] for v in (n[col], want)), strict=True):
                if not (math.isnan(g) and math.isnan(w)):
                    worst = max(worst, abs(g - w) / max(abs(w), 1e-12))
    return worst


def measure(size_name: str, depth: int, rounds: int, device: str = "cpu", eval_batches: int = 8,
            corpus=None, steps: int = 1, old_rounds: int = 1) -> dict[str, Any]:
    """The probe (old, new with the SVDs on the CPU / on the model's device), its forward pass and
    val_loss against one training step (a round of ``steps`` steps, divided)."""
    size = SIZES[size_name]
    corpus = corpus or bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    trainer = make_trainer(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, steps, device,
                           amp="auto")
    # the Trainer's own fixed validation set, at the paper's eval_batches
    from model.corpus import VAL_SEED, fixed_windows

    trainer.val_x, trainer.val_y = (t.to(trainer.device) for t in fixed_windows(
        corpus.val, eval_batches * size.batch, size.context, VAL_SEED))
    model, x = trainer.model, trainer.probe_x
    times = alternate({"step": trainer.train_epoch,
                       "probe_cpu": lambda: probe_layers(model, x, decomp_device="cpu"),
                       "probe_same": lambda: probe_layers(model, x, decomp_device="same"),
                       "forward": lambda: probe_inputs(model, x), "val_loss": trainer.val_loss},
                      rounds=rounds, warmup=1, device=device)
    old = old_probe_layers() if old_rounds > 0 else None
    if old is not None:
        old_times = alternate({"step": trainer.train_epoch, "probe_old": lambda: old(model, x)},
                              rounds=old_rounds, warmup=1, device=device)
        times["probe_old"] = old_times["probe_old"]
        times["step"] += old_times["step"]
    # the values, all of one model state (the timed calls saw it change between steps)
    out_rows = {w: probe_layers(model, x, decomp_device=w) for w in ("cpu", "same")}
    if old is not None:
        out_rows["old"] = old(model, x)
    auto = decomposition_device("auto", probe_inputs(model, x).scores)
    auto_key = "probe_cpu" if auto.type == "cpu" else "probe_same"
    t_step = med(times["step"]) / steps
    in_steps = {k: med(v) / t_step for k, v in times.items() if k != "step"}
    out = {
        "size": size_name, "depth": depth, "device": device, "rounds": rounds, "old_rounds": old_rounds,
        "steps_per_round": steps, "amp": str(trainer.amp_dtype), "auto_decomp_device": str(auto),
        "probe_batch": list(x.shape), "train_batch": [size.batch, size.context],
        **{f"{k}_s": v for k, v in times.items()},
        **{f"{k}_in_steps": v for k, v in in_steps.items()},
        "probe_in_steps": in_steps[auto_key], "val_loss_in_steps": in_steps["val_loss"],
        "probe_plus_val_in_steps": in_steps[auto_key] + in_steps["val_loss"],
        "probe_rows": len(out_rows["cpu"]), "columns": sorted(out_rows["cpu"][0]),
    }
    if "old" in out_rows:
        out["max_rel_diff_vs_old"] = {w: max_rel_diff(out_rows[w], out_rows["old"]) for w in ("cpu", "same")}
    print(f"  {size_name} L{depth}, model on {device}: step {fmt_s(t_step)}", flush=True)
    for key, label in (("probe_old", "probe, old (per layer, today's code)"),
                       ("probe_cpu", "probe, new, SVDs on the CPU"),
                       ("probe_same", f"probe, new, SVDs on the model's device ({device})"),
                       ("forward", "  of which the probe's forward pass"),
                       ("val_loss", f"val_loss ({eval_batches} batches)")):
        if key in times:
            diff = out.get("max_rel_diff_vs_old", {}).get(key.removeprefix("probe_"))
            note = "" if diff is None else f"   (max rel. diff vs old {diff:.1e})"
            print(f"    {label:<46} {fmt_s(med(times[key])):>9} = {in_steps[key]:6.2f} steps{note}", flush=True)
    print(f"    auto puts the SVDs on {auto}: probe + val_loss = {out['probe_plus_val_in_steps']:.2f} steps "
          f"(target <= {TARGET_STEPS:g})", flush=True)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.probe_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="4,8")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--old-rounds", type=int, default=1, help="rounds of today's per-layer probe (0: skip it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=1, help="training steps per timed round")
    p.add_argument("--quick", action="store_true", help="depth 4, two rounds")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: seconds")
    p.add_argument("--json", default=None, help="also write the figures to this file (bench/gpu.sh)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    threads = set_threads(args.threads)
    depths = [int(d) for d in args.depths.split(",")]
    size, eval_batches = "paper", 8
    if args.quick:
        depths, args.rounds = [4], 2
    if args.tiny:
        size, depths, args.rounds, eval_batches = "tiny", [2], 2, 2
    print(f"bench.probe_cost: the per-epoch probe and val_loss vs one training step, {size} size, "
          f"{threads} thread(s), device {args.device}", flush=True)
    corpus = bench_corpus(SIZES[size].corpus)
    results = [measure(size, d, args.rounds, args.device, eval_batches, corpus, args.steps,
                       old_rounds=args.old_rounds) for d in depths]
    worst = max(r["probe_plus_val_in_steps"] for r in results)
    out = {"benchmark": "probe_cost", "results": results, "ratio": worst, "target": f"<= {TARGET_STEPS:g} steps",
           "met": worst <= TARGET_STEPS, "machine": machine()}
    print_ratio("probe_cost (probe + val_loss)/step (steps, worst depth)", worst, f"<= {TARGET_STEPS:g}")
    out["worst_depth"] = max(results, key=lambda r: r["probe_plus_val_in_steps"]).get("depth")
    out["decomp_device"] = str(decomposition_device("auto", torch.zeros(1, device=args.device)))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
