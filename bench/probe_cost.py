"""Benchmark 2: the cost of the per-epoch probe and validation, in training steps.

    python -m bench.probe_cost [--depths 4,8] [--rounds 2] [--threads 1] [--device cpu|cuda] [--quick|--tiny]

At the paper size (d_model 256, 4 heads, d_mlp 1024, context 128, vocabulary
1758) a Trainer is built and, in one process, alternated (``bench.common.alternate``):
one training step (``Trainer.train_epoch()`` with ``steps_per_epoch=1``, batch
64 × 128; on a GPU a round of several steps, divided), ``probe_layers(model,
probe_x)`` on the Trainer's own probe batch (16 × 128 validation windows) with
its float64 SVDs on the CPU (``decomp_device="cpu"``) and on the model's device
(``"same"``), the probe's forward pass alone (``probe_inputs``) and ``val_loss()``
(8 validation batches of 64 × 128). The per-layer probe the batched one replaced
(``tests/probe_helpers.py``, "old") is timed in ``old_rounds`` rounds of its own
beside the step, and every new row is checked against its rows (largest relative
difference printed). Each figure is median(seconds) / median(step).

The target: at paper width and depth 8, the probe (with its SVDs where
``decomp_device="auto"`` puts them) plus validation ≤ 5 training steps on the GPU.
The ratio printed last is that sum, in steps, at the worst depth.

A pack (``--pack M``, default 12; 0 skips): M plain GPTs of the same shape stacked
into one (``stacked_gpt``, as a pack's trainer holds them) and probed in one call
(``probe_members``), alternated with one run's probe (``probe_members`` of member 0's own
plain GPT, the same call as ``probe_layers``): the pack's time per member as × one run's
(median over rounds of the per-round ratio; target on the CPU ≤ 0.5×), and the pack's rows
against each member's own probe (largest relative difference). Where the decompositions
should run is measured on the probe's own matrices: one probe of one run, and one of the pack,
with every float64 SVD batch it makes timed on the CPU and on the model's device (the copy
there included); the faster total is the "decompositions on" device, for each.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import nn

from bench.common import (
    alternate,
    bench_corpus,
    fmt_s,
    machine,
    med,
    paired_ratio,
    print_ratio,
    set_threads,
    sync,
)
from bench.train_step import SIZES, make_trainer, model_config
from metrics import spectra
from metrics.probe import decomposition_device, faster, probe_inputs, probe_layers, probe_members
from model.qk_init import build_model
from model.stack import stack

#: Today's per-layer probe, kept verbatim for the tests; absent outside a checkout.
OLD_PROBE = Path(__file__).resolve().parents[1] / "tests" / "probe_helpers.py"
TARGET_STEPS = 5.0
#: The target: a pack's probe time per member, as × one run's probe, on the CPU.
TARGET_PACK = 0.5


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


def stacked_gpt(models: Sequence[nn.Module]) -> nn.Module:
    """The pack of plain GPTs of one shape, as the trainer builds it (``model.stack.stack``)."""
    return stack(models)[0]


def real_decomposition_seconds(model: nn.Module, tokens: torch.Tensor) -> dict[str, Any]:
    """One probe of ``model`` (one run or a pack) with every float64 SVD batch it makes timed on
    the CPU and on the model's device (once each, the copy there included; call after a warm-up
    probe): seconds per device, the faster, and the batches' shapes."""
    home = tokens.device
    devices = [torch.device("cpu")] + ([home] if home.type != "cpu" else [])
    seconds = {str(d): 0.0 for d in devices}
    shapes: list[list[int]] = []
    real = spectra.svdvals

    def timed(m: torch.Tensor) -> torch.Tensor:
        shapes.append(list(m.shape))
        for d in devices:
            sync(home)
            t0 = time.perf_counter()
            with spectra.decompositions_on(d):
                real(m)
            sync(d)
            sync(home)
            seconds[str(d)] += time.perf_counter() - t0
        return real(m)

    with mock.patch.object(spectra, "svdvals", timed):
        probe_members(model, tokens, decomp_device="same")
    best = faster({torch.device(d): s for d, s in seconds.items()})
    return {"seconds": seconds, "device": str(best), "batches": shapes,
            "matrices": sum(math.prod(sh[:-2]) for sh in shapes)}


def measure_pack(mcfg, m: int, tokens: torch.Tensor, rounds: int, device: str) -> dict[str, Any]:
    """A pack of m at ``mcfg`` probed in one call against one run's probe of the same shape:
    times, the per-member ratio, the values against each member's own probe, and where the
    decompositions of each should run."""
    plain = [build_model(mcfg, "independent_xavier", 37 + i).to(device) for i in range(m)]
    pack = stacked_gpt(plain)
    run = plain[0]
    times = alternate({"run": lambda: probe_members(run, tokens), "pack": lambda: probe_members(pack, tokens)},
                      rounds=rounds, warmup=1, device=device)
    rows = probe_members(pack, tokens)
    diff = max(max_rel_diff(rows[i], probe_layers(m, tokens)) for i, m in enumerate(plain))
    decomp = {"run": real_decomposition_seconds(run, tokens), "pack": real_decomposition_seconds(pack, tokens)}
    out = {"pack": m, "probe_run_s": times["run"], "probe_pack_s": times["pack"],
           "probe_pack_per_member_s": med(times["pack"]) / m,
           "pack_per_member_ratio": paired_ratio(times["pack"], times["run"]) / m,
           "max_rel_diff_pack_vs_members": diff,
           "decomp_seconds": {w: d["seconds"] for w, d in decomp.items()},
           "decomp_matrices": {w: d["matrices"] for w, d in decomp.items()},
           "decomp_device_run": decomp["run"]["device"], "decomp_device_pack": decomp["pack"]["device"]}
    print(f"    probe of a pack of {m} in one call, per member {fmt_s(out['probe_pack_per_member_s']):>9} "
          f"vs one run's probe {fmt_s(med(times['run']))}: {out['pack_per_member_ratio']:.2f}x "
          f"(target <= {TARGET_PACK:g}x on the CPU; max rel. diff vs each member's own probe {diff:.1e})", flush=True)
    for w, d in decomp.items():
        per = ", ".join(f"{dev} {fmt_s(sec)}" for dev, sec in d["seconds"].items())
        print(f"    decompositions of {'one run' if w == 'run' else f'the pack of {m}'}'s probe "
              f"({len(d['batches'])} batches, {d['matrices']} matrices): {per} -> {d['device']}", flush=True)
    return out


def measure(size_name: str, depth: int, rounds: int, device: str = "cpu", eval_batches: int = 8,
            corpus=None, steps: int = 1, old_rounds: int = 1, pack: int = 12) -> dict[str, Any]:
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
                       "forward": lambda: probe_inputs(model, x), "val_loss": trainer.val_losses},
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
    if pack > 0:
        out.update(measure_pack(mcfg, pack, x, rounds, device))
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.probe_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="4,8")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--old-rounds", type=int, default=1, help="rounds of today's per-layer probe (0: skip it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=1, help="training steps per timed round")
    p.add_argument("--pack", type=int, default=12, help="members of the pack probed in one call (0: skip)")
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
    if args.pack < 0:
        raise SystemExit(f"--pack {args.pack}: must be 0 (skip) or a number of members >= 1")
    results = [measure(size, d, args.rounds, args.device, eval_batches, corpus, args.steps,
                       old_rounds=args.old_rounds, pack=args.pack) for d in depths]
    worst = max(r["probe_plus_val_in_steps"] for r in results)
    at = max(results, key=lambda r: r["probe_plus_val_in_steps"])
    out = {"benchmark": "probe_cost", "results": results, "ratio": worst, "target": f"<= {TARGET_STEPS:g} steps",
           "met": worst <= TARGET_STEPS, "machine": machine(), "worst_depth": at.get("depth"),
           # where one run's (and a pack's) decompositions are faster, timed on the probe's own matrices
           "decomp_device": at.get("decomp_device_run", at["auto_decomp_device"])}
    if args.pack > 0:
        pack_worst = max(results, key=lambda r: r["pack_per_member_ratio"])
        out.update(pack=args.pack, pack_ratio=pack_worst["pack_per_member_ratio"], pack_depth=pack_worst["depth"],
                   pack_target=f"<= {TARGET_PACK:g}x", pack_met=pack_worst["pack_per_member_ratio"] <= TARGET_PACK,
                   decomp_device_pack=at["decomp_device_pack"])
        print(f"probe of a pack of {args.pack}, per member, as x one run's probe (worst depth "
              f"{pack_worst['depth']}): {out['pack_ratio']:.3f}   (target {out['pack_target']} on the CPU)")
    print_ratio("probe_cost (probe + val_loss)/step (steps, worst depth)", worst, f"<= {TARGET_STEPS:g}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
