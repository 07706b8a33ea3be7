"""Checkpoint extension (SPEC §7): probe public checkpoint series with a pool of Ray actors.

The command line of the extension; the pool is sweep/extension/pool.py.
"""


from __future__ import annotations

import argparse
from pathlib import Path

import ray

from model.plugins import add_plugin_flag, preload
from sweep.cli import (
    DEFAULT_STORE,
    UsageError,
    at_least,
    existing_path,
    flatten,
    gpu_fraction,
    name_list,
    parser,
    positive,
    read_text,
    run_cli,
)
from sweep.extension.checkpoint_series import (
    DEFAULT_REVISIONS,
    SERIES,
    build_manifest,
    load_manifest,
    write_manifest,
)
from sweep.extension.pool import format_summary, run_extension, summarize
from sweep.extension.revision_probe import (
    ProbeSettings,
)
from sweep.ray_env import absolute_uri, init_ray, node_gpus
from sweep.store import Store, sweep_lock

# --- command line ---------------------------------------------------------------------------


def default_probe_text() -> str:
    """The embedded ``stdlib-docs`` corpus (SPEC §2)."""
    from model.corpus import stdlib_docs_text

    return stdlib_docs_text()


PROG = "python -m sweep.extension"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    preload(argv, PROG)  # --plugin modules: their names are valid below
    p = parser(PROG, __doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--manifest", help="JSON manifest of revisions (see sweep/extension/checkpoint_series.py)")
    src.add_argument("--series", type=name_list, nargs="+", metavar="NAME",
                     help=f"series from the registry, a,b or a b (default: all): {', '.join(SERIES)}")
    p.add_argument("--revisions", type=int, default=DEFAULT_REVISIONS,
                   help="revisions per series, log-uniform over training (endpoint-only series: 1)")
    p.add_argument("--write-manifest", metavar="FILE", help="save the manifest used, for a rerun")
    p.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    p.add_argument("--actors", type=int, default=2, help="probe actors (>= 1)")
    p.add_argument("--gpus-per-actor", type=float, default=None,
                   help="GPUs per actor, 0..one node's GPUs (default 0.25 when the cluster has GPUs, else 0)")
    p.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs per actor (> 0); torch threads = max(1, floor of it)")
    p.add_argument("--text", help="probe text, a UTF-8 file (default: the embedded stdlib-docs corpus)")
    p.add_argument("--n-seqs", type=int, default=16, help="probe sequences (>= 1)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per probe sequence (>= 2)")
    p.add_argument("--hf-cache", help="hub cache shared by the actors of a node (default: HF's own)")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries of a revision whose actor keeps dying before it is recorded as failed (>= 1)")
    p.add_argument("--allow-pickle-weights", action="store_true",
                   help="also load pickled *.bin weights when a revision has no safetensors "
                   "(a pickle can run code: only for repositories you trust)")
    p.add_argument("--force", action="store_true", help="redo revisions already in the store")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--num-cpus", type=int, help="CPUs of a local Ray, >= 1 (default: all)")
    p.add_argument("--num-gpus", type=int, help="GPUs of a local Ray, >= 0 (default: detected)")
    add_plugin_flag(p)
    args = p.parse_args(argv)
    args.series = flatten(args.series)
    if args.series is not None:
        args.series = list(args.series)
        bad = [s for s in args.series if s not in SERIES]
        if bad or not args.series:
            p.error(f"argument --series: invalid choice: {bad[0] if bad else ''!r} "
                    f"(choose from {', '.join(SERIES)})")
    return args


def check_args(args: argparse.Namespace) -> None:
    """Every value, before the store is touched or Ray starts."""
    at_least("--actors", args.actors, 1)
    at_least("--n-seqs", args.n_seqs, 1)
    at_least("--seq-len", args.seq_len, 2)
    at_least("--revisions", args.revisions, 1)
    at_least("--max-attempts", args.max_attempts, 1)
    positive("--cpus-per-actor", args.cpus_per_actor)
    at_least("--num-cpus", args.num_cpus, 1)
    at_least("--num-gpus", args.num_gpus, 0)
    if args.address and (args.num_cpus is not None or args.num_gpus is not None):
        raise UsageError(f"--num-cpus/--num-gpus size a local Ray; with --address {args.address} the "
                         "cluster's own resources are used (drop one of them)")
    node = None if args.address else node_gpus(args.num_gpus)
    gpu_fraction("--gpus-per-actor", args.gpus_per_actor, node)
    if args.write_manifest:
        parent = Path(args.write_manifest).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--write-manifest {args.write_manifest}: folder {parent} does not exist")


def main(argv: list[str] | None = None) -> int:
    """Probe the revisions; a bad value ends it with one line and exit status 2, before Ray starts."""
    return run_cli(PROG, argv, parse_args, _main)


def _main(args: argparse.Namespace) -> int:
    check_args(args)
    if args.manifest:
        existing_path("--manifest", args.manifest)
        manifest = load_manifest(args.manifest, require_paths=True)
    else:
        try:
            manifest = build_manifest(args.series or list(SERIES), args.revisions)
        except Exception as exc:  # the hub listing needs the network
            raise UsageError(f"cannot list the series' revisions on the hub ({type(exc).__name__}: {exc}); "
                             "without network access pass --manifest with local paths") from None
    text = read_text("--text", args.text) if args.text else default_probe_text()
    if args.text and len(text) < args.n_seqs:
        raise UsageError(f"--text {args.text}: {len(text)} characters cannot give --n-seqs {args.n_seqs} "
                         "sequences")
    store_uri = absolute_uri(args.store)
    store = Store(store_uri)
    store.check_writable()
    if args.write_manifest:
        write_manifest(manifest, args.write_manifest)
    n_revs = sum(len(s.revisions) for s in manifest.series)
    print(f"[extension] {len(manifest.series)} series, {n_revs} revisions -> {store_uri}")
    settings = ProbeSettings(store_uri, args.n_seqs, args.seq_len, args.hf_cache,
                             max(1, int(args.cpus_per_actor)), args.allow_pickle_weights,
                             args.cpus_per_actor, tuple(args.plugin))
    started = init_ray(args.address, args.num_cpus, args.num_gpus)
    try:
        with sweep_lock(store, "extension"):
            results = run_extension(manifest, settings, text, args.actors, args.gpus_per_actor,
                                    args.force, args.max_attempts)
    finally:
        if started:
            ray.shutdown()
    print(format_summary(summarize(results), results))
    return 0
