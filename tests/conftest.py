"""Fixtures shared by the test modules (pytest finds them here; no test module imports another).

Layout: one test file per module, flat, named after the module's dotted path with ``_`` for
``.``: ``model/corpus.py`` -> ``test_model_corpus.py``, ``sweep/store/parquet.py`` ->
``test_sweep_store_parquet.py``. A test sits in the file of the function it exercises; a
test that drives a pipeline on Ray (sweep -> store -> browse / report) sits in the file of its
entry module (``test_sweep_driver_runner.py``, ``test_sweep_extension_pool.py``). A second file for
one module carries a suffix naming what sets it apart: ``_s3`` (moto's S3 server),
``_reference`` (bench's plain training loop), ``_toy`` (a toy per-layer metric added to
``metrics.columns`` and followed to the store and the report). Not named after one module: ``test_plugins.py``
(docs/extending.md's worked example; model/plugins.py), ``test_security.py`` (untrusted pickles across
trainer, Tune checkpoints and the checkpoint probe), ``test_bench_smoke.py`` (bench/), ``test_entry_points.py`` (every command's parser imports nothing that
trains), ``test_imports.py`` (which package may import which, where Ray may be, no import circle),
``test_cluster_yaml.py`` and ``test_ray_auth.py`` (the cluster launcher files and Ray's token
auth), ``test_lock.py`` (requirements.lock against pyproject.toml), ``test_docs.py``
(docs/SPEC.md: every "SPEC §n" in the code resolves; every path the docs name exists) and ``test_docs_blocks.py`` (every bash and
python block of README.md and docs/*.md runs). Helpers shared by several files are plain modules without the ``test_`` prefix
(``helpers.py``, ``store_helpers.py``, ``intervention_helpers.py``, ``extension_helpers.py``,
``sweep_helpers.py``, ``hf_trace_helpers.py``, ``s3_server.py``, ``plugin_toy.py``,
``probe_helpers.py``: today's per-layer probe, the batched probe's reference;
``probe_pack_helpers.py``: random tiny GPTs, a pack stacked from plain GPTs, row comparison;
``hub_server.py``: a local Hugging Face Hub serving checkpoint revisions from disk; ``stored_values.py``: numbers
stored in a file compared within float32 rounding, for the tests marked ``stored``).

Hygiene: environment variables change only through ``monkeypatch`` or the fixtures below
(restored after); no test asserts a wall-clock time (timing targets belong to bench/).

Tiers: a test that starts Ray (``ray.init``, ``sweep.placement.ray_env.init_ray``, a ``Cluster``, a sweep
CLI or ``ray start`` in a subprocess) is marked ``ray``; ``pytest -m "not ray"`` runs every
other test. ``ray_only_when_marked`` (autouse) enforces it: in an unmarked test ``ray.init``
raises, Ray left running fails the test, and ``RAY_TMPDIR`` points at a scratch folder where
any Ray session started (in the test's process or a subprocess that inherits the environment)
is found after the test and fails it.

- ``ray_env`` (module): throw-away Ray clusters on this machine: ``RAY_AUTH_MODE=disabled``
  and no ``RAY_ADDRESS``, set through ``MonkeyPatch`` so both are restored after the
  module; any Ray left running is shut down before and after. Yields the MonkeyPatch,
  so a module fixture can set more variables for the same span (e.g. ``PYTHONPATH``).
- ``worker_cluster`` (function): a factory ``worker_cluster(n, system_config=None, **node)``
  for a context manager with a CPU-only head and ``n`` worker nodes, Ray connected.
- ``s3_endpoint`` (module): moto's S3 server (``s3_server.py``) with the AWS_* environment
  pointing at it (other AWS_* cleared), restored after the module.
- ``paper_grid``, ``paper_analysis``, ``small`` (session): synthetic stores with planted
  structure (``sweep.synthetic``) and ``compute_all`` of the paper grid, built once for the
  analysis tests (test_analysis_*.py); tests copy a table before changing it.
- ``one_thread`` (module): torch on one thread for the module, restored after (tiny models run
  fastest so and do not fight other jobs for cores); test_interventions_*.py use it.
- ``revisions`` (session): tiny random Hugging Face models saved as checkpoint revisions
  (``extension_helpers.py``), for test_sweep_extension_revision_probe.py and _pool.py.
- ``registries`` (function): snapshot of the init-regime and intervention registries,
  restored after the test, for tests that register toy entries.
- ``stdlib_docs`` (session): ``model.corpus.stdlib_docs_text()`` of this interpreter, built in a
  subprocess started as soon as collection ends when a selected test uses the fixture, so that its
  ~5 s of parsing the standard library runs beside the other tests (test_model_corpus.py).

Workers: ``make test`` runs the suite on two ``pytest-xdist`` workers (``-n 2 --dist loadfile``: a
file's tests, and so its module fixtures, stay on one worker); a bare ``pytest`` runs in one process.
Each worker gets a Ray temp folder of its own (``RAY_TMPDIR``, set in ``pytest_configure`` for the
session and restored after), so that Ray sessions started by the two workers' tests never share
sockets or session folders. The early start of ``stdlib_docs`` is skipped on a worker (every worker
collects every test, so each would start one): the fixture starts its build when first used. On
workers the longest files are collected first (``LONGEST_FILES``), so that they start first.

GC: when collection ends, ``gc.freeze()`` moves everything imported so far out of the cyclic
collector's reach, so that a ``gc.collect()`` (the checkpoint probe frees each model so; ~0.25 s
each on the whole heap) and the collector's own full passes scan only what the tests create.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import s3_server


@pytest.fixture(scope="module")
def ray_env():
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        mp.delenv("RAY_ADDRESS", raising=False)
        if ray.is_initialized():
            ray.shutdown()
        yield mp
        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture
def worker_cluster(ray_env):
    import ray
    from ray.cluster_utils import Cluster

    @contextlib.contextmanager
    def start(n_workers: int, system_config: dict | None = None, **worker_resources):
        head = {"num_cpus": 0, "include_dashboard": False}
        if system_config:
            head["_system_config"] = system_config
        cluster = Cluster(initialize_head=True, head_node_args=head)
        workers = [cluster.add_node(**worker_resources) for _ in range(n_workers)]
        try:
            ray.init(address=cluster.address)
            cluster.wait_for_nodes()
            yield cluster, workers
        finally:
            ray.shutdown()
            cluster.shutdown()

    return start


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server.moto_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        for k in s3_server.AWS_VARS:
            mp.delenv(k, raising=False)
        for k, v in s3_server.aws_env_vars(endpoint).items():
            mp.setenv(k, v)
        yield endpoint


@pytest.fixture(scope="session")
def paper_grid():
    from sweep.synthetic import make_synthetic_store

    return make_synthetic_store()


@pytest.fixture(scope="session")
def paper_analysis(paper_grid):
    from analysis.compute import compute_all

    return compute_all(paper_grid)


@pytest.fixture(scope="session")
def small():
    from sweep.synthetic import make_synthetic_store

    return make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5)


@pytest.fixture(scope="module")
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def revisions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str]]]:
    """Per architecture, (step, directory) of saved tiny random models with a tokenizer."""
    import torch
    import transformers as tf
    from extension_helpers import CONFIGS, STEPS, tiny_tokenizer

    root = tmp_path_factory.mktemp("revisions")
    tokenizer = tiny_tokenizer()
    out = {}
    for kind, steps in STEPS.items():
        out[kind] = []
        for step in steps:
            torch.manual_seed(step)
            model = tf.AutoModelForCausalLM.from_config(CONFIGS[kind]())
            folder = root / kind / f"step{step}"
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            out[kind].append((step, str(folder)))
    return out


_STDLIB_DOCS: dict = {}  # "dir", "proc": the background build of the stdlib-docs text


def _start_stdlib_docs() -> None:
    out = Path(tempfile.mkdtemp(prefix="qkgeom-stdlib-docs-"))
    code = ("import sys; from model.corpus import stdlib_docs_text\n"
            "open(sys.argv[1], 'w', encoding='utf-8', newline='').write(stdlib_docs_text())")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    _STDLIB_DOCS.update(dir=out, proc=subprocess.Popen(
        [sys.executable, "-c", code, str(out / "text.txt")], cwd=root, env=env, stderr=subprocess.PIPE, text=True))


_WORKER_RAY_TMPDIR: dict = {}  # on an xdist worker: "dir" (its own Ray temp folder), "before" (RAY_TMPDIR as it was)


def _xdist_worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... on a worker; unset otherwise


def pytest_configure(config):
    worker = _xdist_worker()
    if worker:  # short: Ray's socket paths under it must stay < 108 characters
        _WORKER_RAY_TMPDIR.update(dir=tempfile.mkdtemp(prefix=f"qkr{worker}-", dir="/tmp"),
                                  before=os.environ.get("RAY_TMPDIR"))
        os.environ["RAY_TMPDIR"] = _WORKER_RAY_TMPDIR["dir"]


def pytest_unconfigure(config):
    if _WORKER_RAY_TMPDIR:
        before = _WORKER_RAY_TMPDIR["before"]
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(_WORKER_RAY_TMPDIR["dir"], ignore_errors=True)


#: The longest files, longest first (``--durations=0`` per file, LOG.md): on workers they are collected
#: first, so that ``--dist loadfile`` hands them out at the start and the short files fill in after,
#: rather than one worker starting a two-minute file when the other has nothing left.
LONGEST_FILES = ("test_sweep_driver_runner.py", "test_docs_blocks.py", "test_bench_smoke.py",
                 "test_sweep_extension_pool.py", "test_sweep_sequential_rounds_ray.py", "test_plugins.py",
                 "test_sweep_trackers_live.py", "test_sweep_driver_runner_packed.py", "test_sweep_cli.py")


def pytest_collection_modifyitems(session, config, items):
    if not _xdist_worker():
        return
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's order kept


def pytest_collection_finish(session):
    # Everything imported so far (torch, transformers, pandas, ...: millions of objects) lives for the
    # session: moved out of the collector's reach, so that a gc.collect() (sweep.extension's probe
    # frees each model so) scans only what the tests create.
    gc.freeze()
    if session.config.option.collectonly:
        return
    if _xdist_worker():
        return
    if any("stdlib_docs" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_stdlib_docs()


@pytest.fixture(scope="session")
def stdlib_docs() -> str:
    if not _STDLIB_DOCS:
        _start_stdlib_docs()
    proc = _STDLIB_DOCS["proc"]
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    with open(_STDLIB_DOCS["dir"] / "text.txt", encoding="utf-8", newline="") as f:  # the text as written
        return f.read()


@pytest.fixture
def registries():
    """The init-regime and condition registries as they were, restored (with sys.modules) after."""
    from interventions import REGISTRY
    from model.qk_init import QK_INITS

    saved = dict(QK_INITS), dict(REGISTRY), set(sys.modules)
    yield QK_INITS, REGISTRY
    QK_INITS.clear()
    QK_INITS.update(saved[0])
    REGISTRY.clear()
    REGISTRY.update(saved[1])
    for name in set(sys.modules) - saved[2]:  # a plugin imported by the test registers again next time
        if name.startswith(("plugin_", "tests.plugin_")):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """No test may reach the Hugging Face hub: the checkpoint tests use tiny local models only."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


_RAY_SCRATCH: list[str] = []  # one short folder for the session (Ray's socket paths must stay < 108 chars)
_RAY_SCRATCH_N = itertools.count()


def _not_marked(nodeid: str) -> str:
    return (f"{nodeid} starts Ray but is not marked `ray`: add @pytest.mark.ray "
            "(or pytestmark) so that -m \"not ray\" leaves it out (tests/conftest.py)")


@pytest.fixture(autouse=True)
def ray_only_when_marked(request, monkeypatch):
    """Fail a test that starts Ray without the ``ray`` marker (see Tiers above)."""
    if request.node.get_closest_marker("ray") is not None:
        yield
        return
    nodeid = request.node.nodeid

    def refuse(*args, **kwargs):
        raise AssertionError(_not_marked(nodeid))

    ray = sys.modules.get("ray")  # patched only where imported already: importing Ray costs seconds
    running = ray is not None and ray.is_initialized()  # a module fixture of marked tests may hold one
    if ray is not None:
        monkeypatch.setattr(ray, "init", refuse)
        worker = sys.modules.get("ray._private.worker")
        if worker is not None:
            monkeypatch.setattr(worker, "init", refuse)
    if not _RAY_SCRATCH:
        _RAY_SCRATCH.append(tempfile.mkdtemp(prefix="qkrg", dir="/tmp"))
    scratch = os.path.join(_RAY_SCRATCH[0], str(next(_RAY_SCRATCH_N)))
    monkeypatch.setenv("RAY_TMPDIR", scratch)
    yield
    started = bool(glob.glob(os.path.join(scratch, "ray", "session_*")))  # a Ray node's session folder
    shutil.rmtree(scratch, ignore_errors=True)
    ray = sys.modules.get("ray")
    left_running = ray is not None and not running and ray.is_initialized()
    if left_running:
        ray.shutdown()
    if started or left_running:
        pytest.fail(_not_marked(nodeid), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    for folder in _RAY_SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)
    if _STDLIB_DOCS:
        _STDLIB_DOCS["proc"].kill()
        _STDLIB_DOCS["proc"].communicate()
        shutil.rmtree(_STDLIB_DOCS["dir"], ignore_errors=True)
