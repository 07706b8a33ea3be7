"""Is a pack as close to its unpacked runs as two unpacked runs that differ only in the attention
backend? (SPEC §5.1 on a GPU)

    python -m bench.pack_equivalence [--device cuda] [--amp off|bf16] [--members 6] [--depth 4] [--steps 20]
                                     [--size paper|demo|tiny] [--json FILE]

M runs (the three inits in turn, seeds 37, 38, ...) are trained three ways from the same weights
and batches: (A) unpacked ``Trainer``s with the default attention backend (flash where the device
has it), (B) the same with SDPA's math backend: the *backend noise*, and (P) one ``Trainer`` of several members
(default backend). After ``--steps`` steps it compares P with A, and B with A:

- every parameter tensor: ‖P−A‖/‖A‖ against ‖B−A‖/‖A‖, per member (the largest over members);
- the training losses of every step, the validation loss and every probe column after the steps.

The standard: a pack changes results no more than a kernel choice does, P−A no larger than B−A, tensor by tensor and column by column, up to a
factor printed as ``ratio`` (P−A over B−A; ≤ 1 holds it; where B−A is 0 the pack must be exact
too). Why some tensors differ by a lot in both: AdamW divides each step by √v, so a tensor whose
gradient is mostly rounding noise (``k_proj.bias``, zero in exact arithmetic; freshly initialised
zero biases early on) moves by ±lr per step in directions that rounding picks, and its norm is
small: any two runs that round differently differ there by tens of per cent. Runs on the CPU
(float32; the backends are the CPU flash kernel and math) and on CUDA (fp32 or bf16 autocast).
"""

from __future__ import annotations

import argparse
import json
import math
from contextlib import nullcontext
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.common import bench_corpus, build_trainer, member_params, run_members
from bench.train_step import SIZES, model_config
from model.recipe import TrainConfig

INITS = ("independent_xavier", "qk_identical", "disjoint_support_xavier")
RUN_COLUMNS = ("train_loss", "val_loss", "grad_norm")
#: relative differences below this are float32 rounding (4 ulps): both sides count as equal there
FLOOR = 4 * torch.finfo(torch.float32).eps
#: tensors whose gradient is zero in exact arithmetic (softmax is shift-invariant per query): AdamW
#: turns their rounding noise into ±lr steps, so they differ between any two runs; shown, not judged
NOISE_ONLY = ("attn.k_proj.bias",)


def members(m: int, size, steps: int, device: str, amp: str) -> list[tuple[str, int, TrainConfig]]:
    """(init, weight seed, TrainConfig) of each run: the three inits in turn, seeds 37, 38, ..."""
    cfg = lambda seed: TrainConfig(lr=size.lr, batch_size=size.batch, epochs=1, steps_per_epoch=steps,  # noqa: E731
                                   eval_batches=2, probe_seqs=8, amp=amp, device=device, seed=seed)
    return [(INITS[i % 3], 37 + i, cfg(37 + i)) for i in range(m)]


def run_unpacked(mcfg, corpus, ms: list[tuple], backend: SDPBackend | None) -> tuple[list[dict], list[Any]]:
    """Each member as a run of its own under ``backend`` (None: the default); (weights, last reports)."""
    weights, last = [], []
    for m in ms:
        with sdpa_kernel(backend) if backend is not None else nullcontext():
            t = build_trainer(mcfg, corpus, [m])
            (reports,) = run_members(t)
        weights.append(member_params(t, 0))
        last.append(reports[-1])
    return weights, last


def run_packed(mcfg, corpus, ms: list[tuple]) -> tuple[list[dict], list[Any]]:
    pack = build_trainer(mcfg, corpus, ms)
    reports = run_members(pack)
    return [member_params(pack, i) for i in range(len(ms))], [r[-1] for r in reports]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a−b‖ / ‖b‖ (0 when both are 0)."""
    denom = b.double().norm().item()
    diff = (a.double() - b.double()).norm().item()
    return 0.0 if diff == 0 else diff / denom if denom else math.inf


#: a column that is a difference of two others is measured against their scale, not its own
#: (pr_q − pr_k is small where the two are close, and its relative error is cancellation)
SCALE_OF = {"pr_q_minus_pr_k": ("pr_q", "pr_k")}


def value_rel(a: float | None, b: float | None, scale: float = 0.0) -> float:
    if a is None or b is None:
        return 0.0 if a is b else math.inf
    return 0.0 if a == b else abs(a - b) / max(abs(b), scale, 1e-12)


def compare(ref_w, ref_r, other_w, other_r) -> dict[str, float]:
    """Largest relative difference over members, per parameter and per reported value."""
    out: dict[str, float] = {}
    for w_ref, w in zip(ref_w, other_w, strict=True):
        for name, t in w_ref.items():
            out[f"param {name}"] = max(out.get(f"param {name}", 0.0), rel(w[name], t))
    for r_ref, r in zip(ref_r, other_r, strict=True):
        for col in RUN_COLUMNS:
            out[f"run {col}"] = max(out.get(f"run {col}", 0.0), value_rel(r.run[col], r_ref.run[col]))
        for row_ref, row in zip(r_ref.layers, r.layers, strict=True):
            for col, v in row_ref.items():
                if col == "layer" or not isinstance(v, float):
                    continue
                key = f"probe {col}"
                scale = max((abs(row_ref[c]) for c in SCALE_OF.get(col, ())), default=0.0)
                out[key] = max(out.get(key, 0.0), value_rel(row[col], v, scale))
    return out


def measure(size_name: str, m: int, depth: int, steps: int, device: str, amp: str) -> dict[str, Any]:
    size = SIZES[size_name]
    corpus = bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    ms = members(m, size, steps, device, amp)
    a = run_unpacked(mcfg, corpus, ms, None)
    b = run_unpacked(mcfg, corpus, ms, SDPBackend.MATH)
    p = run_packed(mcfg, corpus, ms)
    pack, noise = compare(*a, *p), compare(*a, *b)
    rows = []
    for key in pack:
        ratio = max(pack[key], FLOOR) / max(noise[key], FLOOR)
        rows.append({"what": key, "pack_vs_unpacked": pack[key], "backend_noise": noise[key], "ratio": ratio,
                     "noise_only": key.endswith(NOISE_ONLY)})
    judged = [r for r in rows if not r["noise_only"]]
    worst = max(judged, key=lambda r: r["ratio"])
    return {"size": size_name, "members": m, "depth": depth, "steps": steps, "device": device, "amp": amp,
            "rows": rows, "worst": worst, "held": all(r["ratio"] <= 1.0 for r in judged),
            "largest_pack_param": max((r for r in rows if r["what"].startswith("param")),
                                      key=lambda r: r["pack_vs_unpacked"])}


def report(r: dict[str, Any], show: int = 12) -> None:
    print(f"bench.pack_equivalence: {r['size']} width, depth {r['depth']}, M = {r['members']}, {r['steps']} steps, "
          f"{r['device']}, amp {r['amp']}: pack vs unpacked (P−A) against unpacked math vs default attention (B−A)")
    rows = sorted(r["rows"], key=lambda x: -max(x["pack_vs_unpacked"], x["backend_noise"]))
    print(f"  {'largest differences':42s} {'P−A':>10s} {'B−A':>10s} {'ratio':>7s}")
    for x in [x for x in rows if not x["noise_only"]][:show]:
        print(f"  {x['what']:42s} {x['pack_vs_unpacked']:10.2e} {x['backend_noise']:10.2e} {x['ratio']:7.2f}")
    noise = [x for x in r["rows"] if x["noise_only"]]
    if noise:
        print(f"  k_proj.bias (gradient 0 in exact arithmetic: rounding noise, not judged): P−A up to "
              f"{max(x['pack_vs_unpacked'] for x in noise):.2f}, B−A up to {max(x['backend_noise'] for x in noise):.2f}")
    over = [x for x in r["rows"] if x["ratio"] > 1.0 and not x["noise_only"]]
    print(f"  {len(r['rows']) - len(noise)} tensors and columns judged (floor {FLOOR:.1e}); P−A > B−A in {len(over)}"
          + (f" (worst: {r['worst']['what']} ×{r['worst']['ratio']:.2f})" if over else "")
          + f"; the standard {'holds' if r['held'] else 'does not hold'}", flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.pack_equivalence", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="demo", choices=sorted(SIZES))
    p.add_argument("--members", type=int, default=6)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", default="off", choices=("off", "bf16"))
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    r = measure(args.size, args.members, args.depth, args.steps, args.device, args.amp)
    report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return r


if __name__ == "__main__":
    main()
