"""Checkpoint extension (SPEC §7): probe public checkpoint series as Ray tasks, each sized by its revision.

The command line of the extension; the pool is sweep/extension/pool.py. Exit status:
0 every revision was probed (now or in an earlier run); 1 some revision failed (the
closing summary names each with its reason; its row in the store says why); 2 bad
input (one line on stderr, before Ray starts).
"""


from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from model.plugins import Plugins, add_plugin_flag, preload
from sweep.cli import (
    DEFAULT_STORE,
    UsageError,
    at_least,
    existing_path,
    flatten,
    gpu_fraction,
    local_ray_sizes,
    name_list,
    parser,
    read_text,
    run_cli,
)
from sweep.extension.checkpoint_series import (
    DEFAULT_REVISIONS,
    MIN_FIT_REVISIONS,
    SERIES,
    Manifest,
    default_series,
    load_manifest,
    write_manifest,
)
from sweep.extension.seed_sets import SET_ALIASES, SETS, expand_selection, selection_names, unpaired
from sweep.placement.ray_env import absolute_uri, init_ray, node_gpus

if TYPE_CHECKING:  # Ray, torch and the store load after the flags are parsed (--help answers at once)
    from sweep.extension.pool import JobResult
    from sweep.extension.revision_probe import ProbeSettings

#: ``--disk-wait``'s default: ``sweep.extension.disk.DISK_WAIT`` (tests/test_sweep_extension_cli.py checks
#: that they agree), named here so that the parser imports nothing heavy
DISK_WAIT = 7200.0
#: ``--probe-mode``: ``sweep.extension.revision_probe.PROBE_MODES`` (tests/test_entry_points.py checks
#: that they agree), named here so that the parser imports no torch
PROBE_MODES = ("auto", "whole", "streamed")

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
                     help=f"series from the registry, a,b or a b (default: the paper's, {', '.join(default_series())}"
                     f"): {', '.join(SERIES)}; or sets of seeds of one model, each seed a series (SPEC §7 'Sets'; "
                     f"the Hub's listing says which exist): {', '.join(SETS)}; "
                     + "; ".join(f"{a} = {', '.join(v)}" for a, v in SET_ALIASES.items()))
    p.add_argument("--revisions", type=int, default=DEFAULT_REVISIONS,
                   help="revisions per series, log-uniform over training (endpoint-only series: 1); a set's seeds "
                   "all at the same ones, picked from the steps every seed has")
    p.add_argument("--write-manifest", metavar="FILE", help="save the manifest used, for a rerun")
    p.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    p.add_argument("--actors", type=int, default=2, help="revisions probed at once, each a Ray task (>= 1)")
    p.add_argument("--gpus-per-actor", type=float, default=None,
                   help="GPUs per actor, 0..one node's GPUs (default 0.25 when the cluster has GPUs, else 0)")
    p.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs per actor (> 0); torch threads = max(1, floor of it)")
    p.add_argument("--text", help="probe text, a UTF-8 file (default: the embedded stdlib-docs corpus)")
    p.add_argument("--n-seqs", type=int, default=16, help="probe sequences (>= 1)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per probe sequence (>= 2)")
    p.add_argument("--hf-cache", help="hub cache shared by the actors of a node (default: HF's own)")
    p.add_argument("--disk-budget", type=size_arg, metavar="SIZE",
                   help="most bytes of hub downloads the cache of a node holds at once, e.g. 40GB: each revision "
                   "is downloaded, probed, then what this run downloaded is deleted (default: no limit, kept)")
    p.add_argument("--disk-wait", type=float, default=DISK_WAIT, metavar="SECONDS",
                   help="seconds a revision waits for room in --disk-budget (saying who holds it) before it fails "
                   f"(default {DISK_WAIT:.0f})")
    p.add_argument("--probe-mode", choices=PROBE_MODES, default="auto",
                   help="whole: load each model; streamed: one decoder block in memory at a time; auto: streamed "
                   "when the whole model does not fit --memory-per-actor")
    p.add_argument("--memory-per-actor", type=size_arg, metavar="SIZE",
                   help="memory one probe may use in auto mode, e.g. 16GB (default: the smallest node's Ray "
                   "memory over the probes its CPUs hold)")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries of a revision whose worker keeps dying before it is recorded as failed (>= 1)")
    p.add_argument("--allow-pickle-weights", action="store_true",
                   help="also load pickled *.bin weights when a revision has no safetensors "
                   "(a pickle can run code: only for repositories you trust)")
    p.add_argument("--force", action="store_true", help="redo revisions already in the store")
    p.add_argument("--dry-run", action="store_true",
                   help="plan every revision (bytes, probe mode, memory, duplicates, refusals) and project the "
                   "run's time on this machine (--num-cpus) or --address's nodes, then stop: no Ray task, nothing "
                   "downloaded or written")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--num-cpus", type=int, help="CPUs of a local Ray, >= 1 (default: all)")
    p.add_argument("--num-gpus", type=int, help="GPUs of a local Ray, >= 0 (default: detected)")
    add_plugin_flag(p)
    args = p.parse_args(argv)
    args.series = flatten(args.series)
    if args.series is not None:
        args.series = list(args.series)
        bad = [s for s in args.series if s not in selection_names()]
        if bad or not args.series:
            p.error(f"argument --series: invalid choice: {bad[0] if bad else ''!r} "
                    f"(choose from {', '.join(selection_names())})")
    return args


def size_arg(text: str) -> int:
    """A byte size flag: ``40GB``, ``1.5TiB``, ``1e9``."""
    from sweep.extension.disk import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def check_args(args: argparse.Namespace) -> None:
    """The flags ``ExtensionSettings`` does not hold, before the store is touched or Ray starts."""
    at_least("--revisions", args.revisions, 1)
    if args.write_manifest:
        parent = Path(args.write_manifest).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--write-manifest {args.write_manifest}: folder {parent} does not exist")


def settings_from_args(args: argparse.Namespace) -> ExtensionSettings:
    """The probe, pool and Ray flags as ``ExtensionSettings`` (checked as they are built)."""
    from sweep.extension.revision_probe import ProbeSettings

    probe = ProbeSettings(args.store, args.n_seqs, args.seq_len, args.hf_cache, max(1, int(args.cpus_per_actor)),
                          args.allow_pickle_weights, args.cpus_per_actor, Plugins.from_args(args),
                          args.disk_budget, args.probe_mode, args.memory_per_actor, args.disk_wait)
    return ExtensionSettings(probe, args.actors, args.gpus_per_actor, args.max_attempts, args.force,
                             args.address, args.num_cpus, args.num_gpus)


def main(argv: list[str] | None = None) -> int:
    """Probe the revisions; a bad value ends it with one line and exit status 2, before Ray starts."""
    return run_cli(PROG, argv, parse_args, _main)


def _main(args: argparse.Namespace) -> int:
    check_args(args)
    settings = settings_from_args(args)
    if args.manifest:
        existing_path("--manifest", args.manifest)
        manifest = load_manifest(args.manifest, require_paths=True)
    else:
        try:
            manifest, notes = expand_selection(args.series or default_series(), args.revisions)
        except Exception as exc:  # the hub listing needs the network
            raise UsageError(f"cannot list the series' revisions on the hub ({type(exc).__name__}: {exc}); "
                             "without network access pass --manifest with local paths") from None
        for line in notes:
            print(f"[extension] {line}", file=sys.stderr, flush=True)
    for line in unpaired(manifest):
        print(line, file=sys.stderr, flush=True)
    if args.dry_run:
        return dry_run(manifest, settings)
    text = read_text("--text", args.text) if args.text else None  # None: the embedded corpus
    if text is not None and len(text) < args.n_seqs:
        raise UsageError(f"--text {args.text}: {len(text)} characters cannot give --n-seqs {args.n_seqs} "
                         "sequences")
    results = probe_checkpoints(manifest, settings, text, save_manifest=args.write_manifest)
    return exit_status(results)


def dry_run(manifest: Manifest, settings: ExtensionSettings) -> int:
    """Print the plan of ``manifest`` (``sweep.extension.plan``) for this machine as one node (or the
    nodes of ``--address``'s cluster), and the projected time of the run; exit 0."""
    from sweep.extension.plan import format_plan, local_node, plan_jobs
    from sweep.extension.projection import plan_projection
    from sweep.extension.revision_probe import jobs_from_manifest

    probe = settings.probe
    actor, largest = local_node(probe.cpus or probe.threads, settings.actors)
    plan = plan_jobs(jobs_from_manifest(manifest), probe, actor, largest)
    print(format_plan(plan, probe, actor))
    nodes, where = cluster_nodes(settings, largest)
    print(plan_projection(plan, probe, nodes, settings.actors, where))
    return 0


def cluster_nodes(settings: ExtensionSettings, memory: int) -> tuple[list[tuple[float, int]], str]:
    """((CPUs, memory) per node, what they are) of the cluster a run would use: ``--address``'s alive
    nodes (read from Ray, no task started), else this machine with ``--num-cpus`` (default: all)."""
    import os

    if settings.address:
        import ray

        joined = not ray.is_initialized()
        if joined:
            ray.init(address=settings.address, log_to_driver=False)
        try:
            nodes = [(n["Resources"].get("CPU", 0.0), int(n["Resources"].get("memory", 0.0))) for n in ray.nodes()
                     if n["Alive"]]
        finally:
            if joined:
                ray.shutdown()
        return nodes, f"the cluster at {settings.address}"
    return [(float(settings.num_cpus or os.cpu_count() or 1), memory)], "this machine"


def exit_status(results: list[JobResult]) -> int:
    """0 when every revision was probed (ok, duplicate or already in the store), 1 when any failed."""
    return 1 if any(r.status == "failed" for r in results) else 0


def fit_warnings(manifest: Manifest, results: list[JobResult] | None = None) -> list[str]:
    """Appendix A fits a series only with >= ``MIN_FIT_REVISIONS`` ok revisions: one warning per
    series below it — from the manifest (before probing), or from ``results`` (after)."""
    out = []
    for s in manifest.series:
        endpoint = s.name in SERIES and SERIES[s.name].endpoint_only is not None
        if results is None:
            n, what = len(s.revisions), "revision(s) in the manifest"
        else:
            n = sum(r.series == s.name and r.status in ("ok", "skipped") for r in results)
            what = "ok revision(s) after this run (failed and duplicate revisions do not count)"
            if n >= MIN_FIT_REVISIONS or len(s.revisions) < MIN_FIT_REVISIONS:
                continue  # a series short from the start was warned about up front
        if n < MIN_FIT_REVISIONS:
            why = " (an endpoint-only series: by design)" if endpoint else ""
            out.append(f"[extension] warning: series {s.name} has {n} {what}; Appendix A fits a slope only "
                       f"for series with >= {MIN_FIT_REVISIONS} ok revisions, so it will not be fitted{why}")
    return out


@dataclass(frozen=True)
class ExtensionSettings:
    """How the extension runs besides what it probes; ``probe`` is what every actor needs."""

    probe: ProbeSettings  # the store (a path or URI), probe batch shape, hub cache, threads, plugins
    actors: int = 2  # probe actors
    gpus_per_actor: float | None = None  # None: a quarter of a GPU when the cluster has GPUs, else 0
    max_attempts: int = 2  # tries of a revision whose actor keeps dying before it is recorded as failed
    force: bool = False  # redo revisions already in the store
    address: str | None = None  # a Ray cluster to join; None: a running Ray, else a local one
    num_cpus: int | None = None  # CPUs of a local Ray (None: all)
    num_gpus: int | None = None  # GPUs of a local Ray (None: detected)

    def __post_init__(self) -> None:
        """Each value on its own, named by its flag (``probe_checkpoints`` checks the GPUs against the nodes)."""
        at_least("--actors", self.actors, 1)
        at_least("--max-attempts", self.max_attempts, 1)
        local_ray_sizes(self.address, self.num_cpus, self.num_gpus)
        gpu_fraction("--gpus-per-actor", self.gpus_per_actor, None)


def probe_checkpoints(manifest: Manifest, settings: ExtensionSettings, text: str | None = None,
                      save_manifest: str | None = None) -> list[JobResult]:
    """The command as a function: probe the manifest's revisions into the store and print a summary.

    ``text``: the probe text (default: the embedded stdlib-docs corpus). ``save_manifest``: a
    file to write the manifest to once the store is known writable. A Ray already running is
    used and left running; otherwise one is started and stopped here.
    """
    import ray

    from sweep.extension.pool import format_summary, run_extension, summarize
    from sweep.store import Store, sweep_lock

    node = None if settings.address else node_gpus(settings.num_gpus)
    gpu_fraction("--gpus-per-actor", settings.gpus_per_actor, node)
    from sweep.extension.record import ProbeRecord, check_store

    store_uri = absolute_uri(settings.probe.store)
    store = Store(store_uri)
    store.check_writable()
    text = default_probe_text() if text is None else text
    jobs = [(s.name, r.revision) for s in manifest.series for r in s.revisions]
    for line in check_store(store, ProbeRecord.of(settings.probe, text), jobs, settings.force):  # before Ray
        print(line, file=sys.stderr, flush=True)
    if save_manifest:
        write_manifest(manifest, save_manifest)
    n_revs = sum(len(s.revisions) for s in manifest.series)
    print(f"[extension] {len(manifest.series)} series, {n_revs} revisions -> {store_uri}")
    for line in fit_warnings(manifest):
        print(line, file=sys.stderr, flush=True)
    probe = replace(settings.probe, store=store_uri)
    started = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
    try:
        with sweep_lock(store, "extension"):
            results = run_extension(manifest, probe, text, settings.actors, settings.gpus_per_actor, settings.force,
                                    settings.max_attempts)
    finally:
        if started:
            ray.shutdown()
    print(format_summary(summarize(results), results), flush=True)
    for line in fit_warnings(manifest, results):
        print(line, file=sys.stderr, flush=True)
    return results
