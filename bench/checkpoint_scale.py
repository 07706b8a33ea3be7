"""Benchmark: checkpoint series of large models in bounded memory and disk (SPEC §7, "Large series").

    python -m bench.checkpoint_scale [--gb 1.1] [--budget-revisions 2.5] [--actors 2] [--threads 1]
                                     [--n-seqs 16] [--seq-len 128] [--out runs/bench/checkpoint_scale]

Builds a GPT-NeoX-shaped and a Llama-shaped model of about ``--gb`` GB each (random float16
weights written straight to 256 MB safetensors shards: no model is ever held whole), four
revisions of each (three with their own weights, ``step2000`` a byte copy of ``step1000``), and
serves them from the local test Hub (tests/hub_server.py, files streamed from disk). Then:

1. **The run**: ``python -m sweep.extension`` on both series with ``--disk-budget`` = ``--budget-
   revisions`` × one revision's files, ``--actors`` probes at once, ``--probe-mode auto`` and
   ``--memory-per-actor`` below the whole-model probe's need, so auto picks the layer-streamed
   probe. A thread measures the bytes under the hub cache every 0.2 s (blobs and partial
   downloads; the high-water mark) beside the ledger's own; the Hub's request log shows whether
   the byte copies were downloaded.
2. **Peak memory of one probe**: for each family, one revision probed in a fresh child process,
   streamed and whole-model, side by side. Peak = the child's ``VmHWM`` (/proc/self/status: the
   resident high-water mark the kernel keeps for the process's address space, mapped file pages
   included), reported above its value after the child's imports (torch, transformers,
   safetensors, the project) and the tokenizer. Not ``ru_maxrss``: Linux carries a parent's
   high-water mark into the child across fork and exec (it read this script's 1.4 GB). The
   weights' value digest (``weights_sha256``) and the probe proper are timed apart.
3. **The projection** for Pythia-12B's 154 revisions on one node with 24 GB of memory (printed
   with its assumptions).

Target: streamed peak − baseline ≤ 0.3 × model bytes + ALLOWANCE (512 MiB: the probe batch's
activations, at most ~0.3 GB at 16 × 128 tokens and d_model ≤ 2048 by ``probe_memory``, and the
allocator's slack); disk high-water ≤ budget; byte copies not downloaded. Needs ~4 × ``--gb``
GB of memory-free disk for the served files, plus the budget. Takes ~20 min on 2 shared cores.

    python -m bench.checkpoint_scale --suite [--suite-revisions 12,3] [--actors 1] [--costs FILE]

**Suite scale** (SPEC §7 "Suite scale"): Pythia-14M- and Pythia-410M-shaped GPT-NeoX revisions
(the PolyPythias model cards' shapes, random float16 weights, local folders: no download):

1. **Revisions per minute** through the real pool (``run_extension`` on a local Ray with
   ``--actors`` probes of one thread each, after one warm-up revision that starts the worker):
   plan, value digest, load, probe and store write of each revision;
2. **Side by side**, in this process, one revision's probe as it runs now (the decoder only) and
   with the unembedding as it ran before (the whole causal LM), alternated, in this process's CPU
   seconds (which other sessions' load barely moves): their ratio, and the probe proper (the
   decoder pass and its columns on the loaded model) over the whole revision;
3. **The projection** of the whole suite (``POLYPYTHIAS``: five sizes × 10 seeds and the 160M
   variants, 154 revisions each) on one 16-core node and on four (``sweep.extension.projection``),
   priced twice: by a revision's CPU seconds in this process (a dedicated core) and by the pool's
   wall seconds per revision at this machine's load; ``--costs FILE`` writes the first for
   ``--dry-run`` (``sweep/extension/probe_costs.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ALLOWANCE = 512 * 2**20
SHARD = 256 * 2**20
GB = 1e9


def family_configs(gb: float) -> dict[str, Any]:
    """GPT-NeoX- and Llama-shaped configs of about ``gb`` GB in float16 (depth scaled to reach it)."""
    from metrics.hf_arch import tiny_config

    neox = dict(hidden_size=1536, num_attention_heads=16, intermediate_size=6144, vocab_size=50304,
                max_position_embeddings=2048)
    llama = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, intermediate_size=5632,
                 vocab_size=32000, max_position_embeddings=2048)
    per_layer = {"gpt_neox": 12 * 1536**2 * 2, "llama": (2 * 2048**2 + 2 * 512 * 2048 + 3 * 2048 * 5632) * 2}
    embed = {"gpt_neox": 2 * 50304 * 1536 * 2, "llama": 2 * 32000 * 2048 * 2}
    out = {}
    for kind, cfg in (("gpt_neox", neox), ("llama", llama)):
        layers = max(2, round((gb * GB - embed[kind]) / per_layer[kind]))
        out[kind] = tiny_config(kind, **cfg, num_hidden_layers=layers, tie_word_embeddings=False)
    return out


def write_revision(config: Any, folder: Path, seed: int, tokenizer: Any) -> int:
    """Random float16 weights of ``config`` as safetensors shards + index, config and tokenizer; bytes."""
    import torch
    from safetensors.torch import save_file

    from metrics.hf_stream import meta_model

    folder.mkdir(parents=True, exist_ok=True)
    shapes = [(n, tuple(p.shape)) for n, p in meta_model(config).state_dict(keep_vars=True).items()]
    groups, cur, size = [], [], 0
    for name, shape in shapes:
        n = 2 * int(torch.Size(shape).numel())
        if cur and size + n > SHARD:
            groups.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += n
    groups.append(cur)
    g = torch.Generator().manual_seed(seed)
    weight_map = {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: (torch.randn(s, generator=g) * 0.02).half() for n, s in group}, folder / fname,
                  metadata={"format": "pt"})
        weight_map |= {n: fname for n, _ in group}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def bench_tokenizer(text: str) -> Any:
    """A byte-level BPE of 4096 tokens trained on the probe text (fits both vocabularies)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([text[i:i + 100_000] for i in range(0, min(len(text), 2_000_000), 100_000)],
                            trainers.BpeTrainer(vocab_size=4096, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok)


class DiskWatch(threading.Thread):
    """The bytes of regular files under ``root`` (not following links; lock files left out), every 0.2 s."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root, self.peak, self.stop = root, 0, threading.Event()

    def now(self) -> int:
        total = 0
        for dirpath, _, names in os.walk(self.root):
            if ".locks" in Path(dirpath).parts:
                continue
            for n in names:
                p = os.path.join(dirpath, n)
                if not os.path.islink(p):
                    try:
                        total += os.path.getsize(p)
                    except OSError:
                        pass
        return total

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.2)


CHILD = r"""
import json, sys, time, torch
from sweep.extension.integrity import weights_sha256
from sweep.extension.revision_probe import Job, ProbeSettings, probe_folder, weight_files, load_tokenizer
from metrics.hf_stream import return_large_frees
folder, mode, threads, n_seqs, seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
return_large_frees()
text = open(sys.argv[6], encoding="utf-8").read()
job = Job("bench", "rev", None, folder, 0, 0, 0.0, mode=mode)
settings = ProbeSettings("unused", n_seqs=n_seqs, seq_len=seq_len)
def hwm():  # the kernel's resident high-water mark of this address space (reset at exec), bytes
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
load_tokenizer(folder, job)
base = hwm()
t0 = time.perf_counter(); weights_sha256(weight_files(folder)); digest = time.perf_counter() - t0
t0 = time.perf_counter(); rows = probe_folder(folder, job, text, settings, torch.device("cpu")); probe = time.perf_counter() - t0
peak = hwm()
print(json.dumps({"base": base, "peak": peak, "digest_s": digest, "probe_s": probe, "rows": rows}))
"""


def child_probe(folder: Path, mode: str, args: argparse.Namespace, text_file: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), mode, str(args.threads), str(args.n_seqs),
                          str(args.seq_len), str(text_file)], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"child probe ({mode}) failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def projection(s_per_gb: float, threads: int, n_seqs: int, seq_len: int) -> list[str]:
    """Pythia-12B's 154 revisions on one 24 GB node, from this run's seconds per GB (see the lines)."""
    from transformers import GPTNeoXConfig

    from metrics.hf_stream import probe_memory
    from sweep.extension.plan import PROCESS_BYTES

    cfg = GPTNeoXConfig(hidden_size=5120, num_hidden_layers=36, num_attention_heads=40, intermediate_size=20480,
                        vocab_size=50688, rotary_pct=0.25, max_position_embeddings=2048, tie_word_embeddings=False)
    mem = probe_memory(cfg, n_seqs, seq_len)
    rev_bytes = 2 * mem.params  # float16 safetensors
    node, ray_share, bandwidth, cores = 24 * GB, 0.7, 100e6, 16
    streamed = mem.streamed + PROCESS_BYTES
    by_memory = int(ray_share * node // streamed)
    budget = 3 * rev_bytes
    actors = max(1, min(by_memory, 2))  # two: one downloads while one probes (budget = 3 revisions)
    probe_s = s_per_gb * rev_bytes / GB * threads / cores  # compute-bound: scales with cores
    download_s = rev_bytes / bandwidth
    per_rev = max(probe_s, download_s) if actors >= 2 else probe_s + download_s
    total = 154 * per_rev
    return [
        f"Pythia-12B: {mem.params / 1e9:.2f} B parameters, {rev_bytes / GB:.1f} GB per revision (float16), "
        f"154 revisions = {154 * rev_bytes / 1e12:.2f} TB",
        f"  whole-model probe needs {(mem.whole + PROCESS_BYTES) / GB:.1f} GB > 24 GB: auto picks the streamed probe, "
        f"{streamed / GB:.1f} GB per probe (largest block {mem.block / 1e6:.0f} M parameters in float32 ×2, "
        f"activations, {PROCESS_BYTES / 2**30:.0f} GiB process)",
        f"  Ray offers ~{ray_share:.0%} of 24 GB = {ray_share * node / GB:.1f} GB: {by_memory} streamed probes fit by "
        f"memory; run {actors} (--actors {actors}) with --disk-budget {budget / GB:.0f}GB (3 revisions: one "
        "probing, one downloading, one spare)",
        f"  assumptions: Hub download {bandwidth / 1e6:.0f} MB/s sustained; probe compute scales with cores "
        f"({s_per_gb:.0f} s/GB measured here on {threads} thread(s) -> {probe_s:.0f} s per revision on {cores} "
        f"cores); download {download_s:.0f} s per revision",
        f"  => {per_rev:.0f} s per revision, {total / 3600:.1f} h for the 154 revisions "
        f"({'download- ' if download_s >= probe_s else 'probe-'}bound), disk at most {budget / GB:.0f} GB",
    ]


#: PolyPythias by size: (layers, d_model, heads) from its model cards; every size's MLP is 4·d_model,
#: its vocabulary 50,304, its rotary 25 % (as Pythia's configs).
POLYPYTHIAS = {"14m": (6, 128, 4), "31m": (6, 256, 8), "70m": (6, 512, 8), "160m": (12, 768, 12),
               "410m": (24, 1024, 16)}
#: The suite: series per size (the original and nine seeds), and the 160M weight-seed and data-seed
#: variants (three each by the model cards; the Hub's listing decides at run time); 154 revisions each.
SUITE_SERIES = {**{size: 10 for size in POLYPYTHIAS}, "160m-weight-seed": 3, "160m-data-seed": 3}
SUITE_REVISIONS = 154


def pythia_config(size: str) -> Any:
    from transformers import GPTNeoXConfig

    layers, d, heads = POLYPYTHIAS[size]
    return GPTNeoXConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d,
                         vocab_size=50304, rotary_pct=0.25, max_position_embeddings=2048, tie_word_embeddings=False)


def _probe_once(folder: Path, text: str, settings: Any, unembed: bool) -> float:
    """Seconds of one whole-mode probe of ``folder`` in this process; ``unembed``: the whole causal LM's
    forward (logits included), as the probe ran before it ran the decoder only."""
    import torch

    import metrics.hf_probe as hp
    from sweep.extension import integrity
    from sweep.extension.revision_probe import Job, probe_folder

    job = Job("bench", folder.name, None, str(folder), 0, 0, 0.0, mode="whole")
    integrity._MEMO.clear()  # each call hashes the weights, as a new revision in the pool does
    now = hp._forward
    if unembed:
        hp._forward = lambda model, ids: model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    try:
        t0 = time.perf_counter()
        probe_folder(str(folder), job, text, settings, torch.device("cpu"))
        return time.perf_counter() - t0
    finally:
        hp._forward = now


def _probe_proper(folder: Path, text: str, settings: Any) -> float:
    """CPU seconds of this process for the decoder pass and its columns alone, on the loaded model (no load,
    digest or tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from metrics.hf_probe import probe_hf_model
    from sweep.extension.revision_probe import probe_windows

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = probe_windows(AutoTokenizer.from_pretrained(str(folder)), text, settings.n_seqs, settings.seq_len)
    t0 = time.process_time()
    probe_hf_model(model, ids)
    return time.process_time() - t0


def suite(args: argparse.Namespace, work: Path, text: str, text_file: Path) -> dict[str, Any]:
    """The suite-scale measurements (module docstring, "Suite scale"); returns what it printed."""
    import ray
    import torch

    from bench.common import alternate, med
    from metrics.hf_stream import probe_memory
    from sweep.extension.checkpoint_series import parse_manifest
    from sweep.extension.pool import run_extension
    from sweep.extension.projection import Costs, project
    from sweep.extension.revision_probe import ProbeSettings

    torch.set_num_threads(args.threads)  # this process's side-by-side probes, as the pool's
    counts = dict(zip(("14m", "410m"), map(int, args.suite_revisions.split(",")), strict=True))
    tokenizer = bench_tokenizer(text)
    folders: dict[str, list[Path]] = {}
    t0 = time.perf_counter()
    for size, n in counts.items():
        config = pythia_config(size)
        folders[size] = [work / size / f"step{k}" for k in range(n + 1)]  # the first: the warm-up revision
        for k, folder in enumerate(folders[size]):
            write_revision(config, folder, 1000 * k + len(size), tokenizer)
    print(f"wrote the revisions in {time.perf_counter() - t0:.0f} s", flush=True)
    settings = ProbeSettings(str(work / "store"), n_seqs=args.n_seqs, seq_len=args.seq_len, threads=args.threads)
    out: dict[str, Any] = {"sizes": {}}
    params = {size: probe_memory(pythia_config(size), args.n_seqs, args.seq_len).params for size in POLYPYTHIAS}

    # --- side by side, in this process -------------------------------------------------------
    for size in counts:
        folder = folders[size][1]
        rounds = 3 if size == "14m" else 1  # after one untimed call each (the files in the page cache)
        cpu: dict[str, list[float]] = {}
        times = alternate({"decoder only": lambda f=folder: _probe_once(f, text, settings, False),
                           "with unembedding": lambda f=folder: _probe_once(f, text, settings, True)},
                          rounds=rounds, warmup=1, cpu_times=cpu)
        proper = _probe_proper(folder, text, settings)
        now, before = med(cpu["decoder only"]), med(cpu["with unembedding"])
        out["sizes"][size] = {"params": params[size], "in_process_cpu_s": now, "in_process_unembed_cpu_s": before,
                              "in_process_wall_s": med(times["decoder only"]), "probe_proper_cpu_s": proper}
        print(f"SIDE BY SIDE {size}-shaped ({params[size] / 1e6:.0f} M parameters), one revision in this process, "
              f"{rounds} round(s), CPU seconds of this process (other sessions' load barely moves them): decoder "
              f"only {now:.2f} s, with the unembedding {before:.2f} s: ratio {now / before:.2f}; the probe proper "
              f"(the decoder pass and its columns on the loaded model) {proper:.2f} s = {proper / now:.0%} of the "
              f"revision (wall: {med(times['decoder only']):.2f} s)", flush=True)

    # --- revisions per minute through the pool ---------------------------------------------------
    ray.init(num_cpus=args.actors * args.threads, include_dashboard=False, log_to_driver=False)
    try:
        for size, paths in folders.items():
            def manifest(ps: list[Path], name: str = f"bench-{size}") -> Any:
                return parse_manifest({"series": [{"name": name, "revisions": [
                    {"revision": p.name, "path": str(p), "tokens": i} for i, p in enumerate(ps)]}]})

            run_extension(manifest(paths[:1], f"warm-{size}"), settings, text, n_actors=args.actors, progress=False)
            t0 = time.perf_counter()
            results = run_extension(manifest(paths[1:]), settings, text, n_actors=args.actors, progress=False)
            wall = time.perf_counter() - t0
            bad = [r for r in results if r.status not in ("ok", "duplicate")]
            if bad:
                raise RuntimeError(f"{size}: {bad[0].series}@{bad[0].revision} {bad[0].status}: {bad[0].reason}")
            n = len(results)
            rate = 60 * n / wall
            per = wall * args.actors / n  # seconds of one revision at one thread, the actors' cores busy
            out["sizes"][size] |= {"pool_revisions": n, "pool_wall_s": wall, "revisions_per_min": rate,
                                   "seconds_per_revision": per, "load": os.getloadavg()}
            print(f"POOL {size}-shaped: {n} revisions in {wall:.1f} s with {args.actors} probe(s) at once of "
                  f"{args.threads} thread(s): {rate:.1f} revisions per minute, {per:.1f} s per revision "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        ray.shutdown()

    # --- the projection --------------------------------------------------------------------------
    loads = ", ".join(f"{out['sizes'][s]['load'][0]:.1f} ({s})" for s in counts)
    measured = (f"bench.checkpoint_scale --suite (a revision's CPU seconds in one process), {machine_line()} at "
                f"load {loads}, {time.strftime('%Y-%m-%d')}")
    revisions = [(params[size.split("-")[0]], 2 * params[size.split("-")[0]])
                 for size, n in SUITE_SERIES.items() for _ in range(n * SUITE_REVISIONS)]
    node_memory = 64 * 2**30
    task = max(probe_memory(pythia_config(s), args.n_seqs, args.seq_len).whole for s in POLYPYTHIAS) + 2**30
    # a dedicated core: a revision's CPU seconds in this process (digest, load, tokenizer, probe); and this
    # machine as it was: the pool's wall seconds per revision under the other sessions' load
    priced = {"cpu": ("in-process CPU seconds per revision", "in_process_cpu_s"),
              "pool": ("the pool's wall seconds per revision at this machine's load", "seconds_per_revision")}
    lines = []
    for what, key in priced.values():
        costs = Costs(tuple(sorted((out["sizes"][s]["params"], out["sizes"][s][key]) for s in counts)),
                      args.n_seqs, args.seq_len, measured)
        for nodes in (1, 4):
            got = project(revisions, costs, args.n_seqs, args.seq_len, [(16.0, node_memory)] * nodes, 1.0, None, task)
            lines.append(f"[{what}] " + got.text(f"{nodes} × 16-core node(s) of 64 GiB"))
    print("\nPROJECTION of the suite (" + ", ".join(f"{n} × pythia-{s}" for s, n in SUITE_SERIES.items())
          + f", {SUITE_REVISIONS} revisions each; weights float16 = 2 bytes per parameter):\n  " + "\n  ".join(lines))
    out["projection"] = lines
    if args.costs:
        Path(args.costs).write_text(json.dumps({
            "about": "Seconds one checkpoint revision takes on a dedicated core (value digest, load, tokenizer, "
                     "probe: this process's CPU seconds; the pool's own cost per revision is within the noise, "
                     "bench/RESULTS.md), at one thread, per parameter count: the dry run's projection "
                     "(sweep/extension/projection.py). Written by python -m bench.checkpoint_scale --suite --costs FILE.",
            "n_seqs": args.n_seqs, "seq_len": args.seq_len, "measured": measured,
            "points": [{"model": f"pythia-{s}-shaped", "params": out["sizes"][s]["params"],
                        "seconds": round(out["sizes"][s]["in_process_cpu_s"], 3),
                        "pool_wall_seconds_at_load": round(out["sizes"][s]["seconds_per_revision"], 3)}
                       for s in counts]},
            indent=1) + "\n")
        print(f"wrote {args.costs}")
    return out


def machine_line() -> str:
    import platform

    return f"{platform.machine()} {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checkpoint_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=1.1, help="bytes of each model, GB (float16)")
    p.add_argument("--budget-revisions", type=float, default=2.5, help="--disk-budget in revisions' bytes")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per probe")
    p.add_argument("--n-seqs", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--out", default="runs/bench/checkpoint_scale")
    p.add_argument("--keep", action="store_true", help="keep the generated revisions (in --out)")
    p.add_argument("--suite", action="store_true", help="suite scale instead: revisions per minute at the 14M and "
                   "410M shapes, and the whole suite's projection (module docstring)")
    p.add_argument("--suite-revisions", default="12,3", help="--suite: revisions of the 14M and the 410M shape")
    p.add_argument("--costs", help="--suite: write the measured seconds per revision here (probe_costs.json)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))  # the local test Hub
    from hub_server import HubRepo, commit_of, hub_server

    from bench.common import machine
    from model.corpus import stdlib_docs_text
    from sweep.extension.disk import LEDGER
    from sweep.store import Store

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ckpt-scale-", dir=out))
    print(json.dumps(machine()), flush=True)
    print(f"load before: {os.getloadavg()}", flush=True)
    text = stdlib_docs_text()
    text_file = work / "probe.txt"
    text_file.write_text(text, encoding="utf-8")
    if args.suite:
        figures = suite(args, work, text, text_file)
        (out / "suite.json").write_text(json.dumps(figures, indent=1))
        print(f"load after: {os.getloadavg()}")
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        return 0
    tokenizer = bench_tokenizer(text)
    repos, sizes, folders = [], {}, {}
    t0 = time.perf_counter()
    for kind, config in family_configs(args.gb).items():
        branches = {}
        for step, seed in ((0, 0), (1000, 1), (3000, 3)):
            folder = work / kind / f"step{step}"
            sizes[kind] = write_revision(config, folder, seed, tokenizer)
            branches[f"step{step}"] = {f.name: f for f in folder.iterdir() if f.is_file()}
            folders[(kind, f"step{step}")] = folder
        branches["step2000"] = dict(branches["step1000"])  # byte copy
        repos.append(HubRepo(f"bench/{kind}", branches))
        print(f"{kind}: {config.num_hidden_layers} layers, d_model {config.hidden_size}, "
              f"{sizes[kind] / GB:.2f} GB per revision", flush=True)
    print(f"wrote the revisions in {time.perf_counter() - t0:.0f} s", flush=True)

    # --- 1. the run ---------------------------------------------------------------------------
    rev_bytes = max(sizes.values())
    budget = int(args.budget_revisions * rev_bytes)
    manifest = {"series": [{"name": kind, "revisions": [{"revision": f"step{s}", "repo": f"bench/{kind}", "tokens": s}
                                                        for s in (0, 1000, 2000, 3000)]} for kind in sizes]}
    (work / "manifest.json").write_text(json.dumps(manifest))
    cache, store = work / "cache", work / "store"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "RAY_ADDRESS"))}
    cmd = [sys.executable, "-m", "sweep.extension", "--manifest", str(work / "manifest.json"), "--store", str(store),
           "--hf-cache", str(cache), "--text", str(text_file), "--n-seqs", str(args.n_seqs), "--seq-len",
           str(args.seq_len), "--actors", str(args.actors), "--num-cpus", str(args.actors * args.threads),
           "--cpus-per-actor", str(args.threads), "--disk-budget", str(budget), "--probe-mode", "auto",
           "--memory-per-actor", str(int(1.5 * rev_bytes))]
    watch = DiskWatch(cache)
    with hub_server(repos, lifetime=7200) as hub:
        env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(work / "hf_home"), "HF_HUB_DISABLE_TELEMETRY": "1",
                "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
        watch.start()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        run_s = time.perf_counter() - t0
        watch.stop.set()
        watch.join()
    print(proc.stdout[-3000:], flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    df = Store(str(store)).read("checkpoints")
    copies_fetched = [p for m, p, s in hub.requests if "/resolve/" in p and not p.endswith("config.json")
                      and any(commit_of(r.repo_id, "step1000") in p for r in repos)]
    ledger = json.loads((cache / LEDGER).read_text())
    left = watch.now()
    probed = 2 * 3
    dups = df[df["status"].str.startswith("duplicate_of")].groupby(["series", "revision"]).ngroups
    print(f"\nrun: {df.groupby(['series', 'revision']).ngroups} revisions in {run_s:.0f} s ({probed} probed, "
          f"{dups} duplicates), {run_s / (probed * rev_bytes / GB):.0f} s per GB probed with {args.actors} probes "
          "at once (downloads, value digests and probes)")
    print(f"DISK high-water {watch.peak / GB:.2f} GB measured, {ledger['high_water'] / GB:.2f} GB by the ledger, "
          f"budget {budget / GB:.2f} GB: {'under' if watch.peak <= budget else 'OVER'}; left after the run "
          f"{left / 1e6:.1f} MB")
    print(f"DUPLICATES byte copies downloaded: {len(copies_fetched)} files (0 = found before download); statuses "
          f"{sorted(set(df['status']))}")

    # --- 2. peak memory of one probe ----------------------------------------------------------
    figures: dict[str, Any] = {"run_s": run_s, "duplicates": dups, "disk_peak": watch.peak, "ledger_high_water": ledger["high_water"],
                               "budget": budget, "copies_fetched": len(copies_fetched), "families": {}}
    for kind in sizes:
        folder = folders[(kind, "step3000")]
        res = {mode: child_probe(folder, mode, args, text_file) for mode in ("streamed", "whole")}
        worst = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for a, b in zip(res["streamed"]["rows"],
                    res["whole"]["rows"], strict=True) for k in b if isinstance(b[k], float))
        b = sizes[kind]
        line = {m: {"extra_over_bytes": (r["peak"] - r["base"]) / b, "peak_GB": r["peak"] / GB,
                    "base_GB": r["base"] / GB, "probe_s_per_GB": r["probe_s"] / (b / GB),
                    "digest_s_per_GB": r["digest_s"] / (b / GB)} for m, r in res.items()}
        ok = res["streamed"]["peak"] - res["streamed"]["base"] <= 0.3 * b + ALLOWANCE
        figures["families"][kind] = {"bytes": b, **line, "max_rel_diff": worst, "met": ok}
        for m in ("streamed", "whole"):
            r = line[m]
            print(f"MEMORY {kind} {m:>8}: peak {r['peak_GB']:.2f} GB, {r['base_GB']:.2f} GB before the probe: "
                  f"(peak - base) / model bytes = {r['extra_over_bytes']:.3f}; probe {r['probe_s_per_GB']:.0f} s/GB, "
                  f"value digest {r['digest_s_per_GB']:.0f} s/GB")
        print(f"  {kind}: streamed rows vs whole rows, largest relative difference {worst:.1e}; target peak - base <= "
              f"0.3 x {b / GB:.2f} GB + {ALLOWANCE / 2**20:.0f} MiB: {'met' if ok else 'NOT met'}")

    # --- 3. projection ------------------------------------------------------------------------
    s_per_gb = max(f["streamed"]["probe_s_per_GB"] + f["streamed"]["digest_s_per_GB"]
                   for f in figures["families"].values())
    lines = projection(s_per_gb, args.threads, args.n_seqs, args.seq_len)
    print("\nPROJECTION\n" + "\n".join(lines))
    print(f"load after: {os.getloadavg()}")
    figures["projection"] = lines
    (out / "results.json").write_text(json.dumps(figures, indent=1))
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    met = all(f["met"] for f in figures["families"].values()) and watch.peak <= budget and not copies_fetched
    print(f"RATIO streamed peak over model bytes: {max(f['streamed']['extra_over_bytes'] for f in figures['families'].values()):.3f} "
          f"(target <= 0.3 + {ALLOWANCE / 2**20:.0f} MiB): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
