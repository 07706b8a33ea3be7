"""Timing helpers shared by the benchmarks.

The machines these run on are shared and noisy, so every comparison runs its
candidates side by side in one process, alternated round by round. The order
within a round flips every other round (A B, B A, A B, …) so that neither
side always runs first (on a loaded 2-core machine the first slot of a round
was measurably slower or faster than the second). A two-sided ratio is the
median over rounds of the per-round ratio (the two sides of a round ran
seconds apart, under the same load); the ratio of the medians is reported too.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.corpus import Corpus, load_corpus
from model.gpt import GPTConfig


def set_threads(n: int) -> int:
    """Set torch's intra-op threads (0 = leave the default); returns the count in effect."""
    if n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued device work (no-op on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_once(fn: Callable[[], Any], device: torch.device | str | None = None) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def alternate(fns: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1,
              device: torch.device | str | None = None,
              cpu_times: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Time each callable ``rounds`` times, interleaved (A B, B A, A B, …) after ``warmup``
    untimed calls each.

    Returns name → list of wall-clock seconds, one per round (round order, whatever the slot).
    If ``cpu_times`` is given it is filled the same way with this process's CPU seconds
    (``time.process_time``), which other processes on a shared machine barely disturb.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    if cpu_times is not None:
        cpu_times.update({name: [] for name in fns})
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            c0 = time.process_time()
            times[name].append(time_once(fns[name], device))
            if cpu_times is not None:
                cpu_times[name].append(time.process_time() - c0)
    return times


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median over rounds of ``num[i] / den[i]``."""
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def paired_spread(num: list[float], den: list[float]) -> tuple[float, float]:
    """(25th, 75th) percentile of the per-round ratios ``num[i] / den[i]``: the noise."""
    r = sorted(n / d for n, d in zip(num, den, strict=True))
    if len(r) < 2:
        return r[0], r[0]
    q = statistics.quantiles(r, n=4, method="inclusive")
    return q[0], q[2]


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def machine() -> dict[str, Any]:
    """Where a figure was measured: cores, load, versions, threads."""
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "cpus": os.cpu_count(), "loadavg_1_5_15": [round(v, 2) for v in load],
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def bench_corpus(spec: str = "stdlib-docs", n_tokens: int = 2_000_000, seed: int = 0) -> Corpus:
    """``stdlib-docs`` (or any spec ``load_corpus`` takes), or ``synthetic:V``: uniform random
    ids over V symbols (no files; V = 1758 gives the paper model's embedding/head size)."""
    if spec.startswith("synthetic:"):
        vocab_size = int(spec.split(":", 1)[1])
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, vocab_size, size=n_tokens, dtype=np.uint16)
        cut = int(0.9 * n_tokens)
        vocab = "".join(chr(0x100 + i) for i in range(vocab_size))
        return Corpus(f"synthetic-{vocab_size}", vocab, ids[:cut], ids[cut:])
    return load_corpus(spec)


def fmt_s(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def print_ratio(name: str, value: float, target: str) -> None:
    """The last line of every benchmark."""
    print(f"RATIO {name} = {value:.3f}   (target {target})")
    sys.stdout.flush()


def write_json(obj: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


# -- the one place bench/ builds and drives a trainer ----------------------------------------------


def build_trainer(model_cfg: GPTConfig, corpus: Corpus, members: list[tuple[str, int, Any]],
                  condition: str = "none", graphs: bool = True) -> Any:
    """``model.trainer.Trainer`` of M = len(members) runs of one shape and condition; members: (init
    regime, weight seed, ``TrainConfig``) each (M = 1: the plain, unstacked GPT). On CUDA with TF32
    on, as a sweep's trials train by default (``model.recipe.set_tf32``: set where a run starts)."""
    from interventions import make_intervention
    from model.recipe import resolve_device, set_tf32
    from model.stack import Member
    from model.trainer import Trainer

    set_tf32(True, resolve_device(members[0][2].device))
    return Trainer(model_cfg, [Member(init, seed, cfg) for init, seed, cfg in members], corpus,
                   lambda: make_intervention(condition), graphs=graphs)


def run_members(trainer: Any) -> list[list[Any]]:
    """``trainer.run()`` to the end; each member's ``EpochReport``s, in member order."""
    reports: dict[int, list[Any]] = {i: [] for i in range(len(trainer.members))}
    trainer.run(lambda i, r: reports[i].append(r))
    return [reports[i] for i in range(len(reports))]


def member_params(trainer: Any, i: int) -> dict[str, torch.Tensor]:
    """Member i's parameters, named as in a plain GPT's ``named_parameters``, detached float32 on the CPU."""
    return {n: p.detach().float().cpu() for n, p in trainer.member_model(i).named_parameters()}


def k_weights(trainer: Any) -> torch.Tensor:
    """Every W_K of the trainer, stacked: [L, D, D] for one run, [M, L, D, D] for a pack."""
    named = dict(trainer.model.named_parameters())
    return torch.stack([named[f"blocks.{i}.attn.k_proj.weight"] for i in range(trainer.model_cfg.n_layer)], dim=-3)
