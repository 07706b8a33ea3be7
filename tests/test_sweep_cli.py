"""Bad inputs across every CLI: one line naming the value, exit status 2, within seconds, no Ray.

Each case runs ``main(argv)`` in-process with ``ray.init`` replaced by a function
that fails the test, then checks: ``SystemExit`` with code 2, exactly one
``{prog}: error: ...`` line on stderr naming the offending value, no traceback,
nothing created under the case's store and storage folders. A few run as real
subprocesses to check the exit status and stderr of ``python -m``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from model import train as model_train
from model.gpt import GPTConfig
from model.recipe import TrainConfig
from sweep import baseline, browse, demo, extension, interventions, report, store
from sweep.cli import local_gpus
from sweep.extension import tiny_series
from sweep.extension.checkpoint_series import ManifestError, load_manifest
from sweep.presets import BASELINE_PRESETS, Preset
from sweep.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"sweep.baseline": baseline, "sweep.interventions": interventions, "sweep.extension": extension,
           "sweep.report": report, "sweep.store": store, "sweep.browse": browse, "sweep.demo": demo,
           "sweep.tiny_series": tiny_series, "model.train": model_train}
NO_GPUS = local_gpus() == 0


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Bad (and good) user files for the table; ``{tmp}`` in argv is replaced by tmp_path."""
    return _write_files(tmp_path)


def _write_files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait ".encode("latin-1") * 50)
    (tmp_path / "short.txt").write_text("too short", encoding="utf-8")
    (tmp_path / "text.txt").write_text("plenty of probe text here. " * 200, encoding="utf-8")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "missing-path.json").write_text(json.dumps({"series": [{"name": "s", "revisions": [
        {"revision": "step1", "path": "no-such-model-dir"}]}]}), encoding="utf-8")
    (tmp_path / "no-repo.json").write_text(json.dumps({"series": [{"name": "s", "revisions": [
        {"revision": "step1", "tokens": 5}]}]}), encoding="utf-8")
    (tmp_path / "empty-store").mkdir()
    (tmp_path / "empty-ray").mkdir()
    return {"tmp": str(tmp_path)}


SWEEP = ["--preset", "smoke", "--store", "{tmp}/store", "--storage", "{tmp}/ray"]
EXT = ["--store", "{tmp}/store", "--text", "{tmp}/text.txt", "--manifest"]
# (module, argv, what the one line must contain)
CASES = [
    ("sweep.baseline", [*SWEEP, "--checkpoint-every", "0"], "--checkpoint-every must be >= 1, got 0"),
    ("sweep.baseline", [*SWEEP, "--cpus-per-trial", "0"], "--cpus-per-trial must be > 0, got 0.0"),
    ("sweep.baseline", [*SWEEP, "--gpus-per-trial", "-1"], "--gpus-per-trial must be >= 0, got -1.0"),
    ("sweep.baseline", [*SWEEP, "--gpus-per-trial", "2.5"], "--gpus-per-trial above 1 must be a whole number"),
    pytest.param("sweep.baseline", [*SWEEP, "--gpus-per-trial", "1"], "--gpus-per-trial 1: one node here has 0",
                 marks=pytest.mark.skipif(not NO_GPUS, reason="this machine has a GPU")),
    ("sweep.baseline", [*SWEEP, "--num-cpus", "-2"], "--num-cpus must be >= 1, got -2"),
    ("sweep.baseline", [*SWEEP, "--max-concurrent", "-1"], "--max-concurrent must be >= 1, got -1"),
    ("sweep.baseline", [*SWEEP, "--max-concurrent", "0"], "--max-concurrent must be >= 1, got 0"),
    ("sweep.baseline", [*SWEEP, "--max-failures", "-2"], "--max-failures must be >= -1 (-1 = retry forever), got -2"),
    ("sweep.baseline", [*SWEEP, "--name", "../../x"], "--name must be a plain name"),
    ("sweep.baseline", [*SWEEP, "--corpus", "{tmp}/missing.txt"], "missing.txt"),
    ("sweep.baseline", [*SWEEP, "--corpus", "{tmp}/latin1.txt"], "not UTF-8: byte 0xe9 at byte offset 3"),
    ("sweep.baseline", [*SWEEP, "--corpus", "{tmp}/short.txt"], "--corpus {tmp}/short.txt: 9 characters, too short for context"),
    ("sweep.baseline", [*SWEEP, "--corpus", "{tmp}"], "is not a file"),
    ("sweep.baseline", [*SWEEP, "--data-dir", "{tmp}"], "--data-dir"),
    ("sweep.baseline", [*SWEEP, "--epochs", "0"], "--epochs must be >= 1, got 0"),
    ("sweep.baseline", [*SWEEP, "--steps-per-epoch", "0"], "--steps-per-epoch must be >= 1, got 0"),
    ("sweep.baseline", [*SWEEP, "--depths", "2", "0"], "--depths must be >= 1, got 0"),
    ("sweep.baseline", [*SWEEP, "--seed-list", "1", "-1"], "--seed-list must be >= 0, got -1"),
    ("sweep.baseline", [*SWEEP, "--preset", "papr"], "invalid choice: 'papr'"),
    ("sweep.baseline", [*SWEEP, "--pack", "0"], "--pack must be auto or a whole number of runs >= 1, got '0'"),
    ("sweep.baseline", [*SWEEP, "--pack", "2.5"], "--pack must be auto or a whole number of runs >= 1, got '2.5'"),
    ("sweep.baseline", [*SWEEP, "--pack", "3", "--dry-run"],
     "--pack 3: a shape (depth, condition) of the baseline grid has at most 2 runs; use 1..2 or auto"),
    ("sweep.baseline", [*SWEEP, "--num-gpus", "-1"], "--num-gpus must be >= 0, got -1"),
    ("sweep.baseline", [*SWEEP, "--address", "auto", "--num-gpus", "1"], "--num-gpus 1 sizes a local Ray"),
    ("sweep.interventions", [*SWEEP, "--conditions", "none,typo_cond"], "'typo_cond' is not valid"),
    ("sweep.interventions", [*SWEEP, "--pack", "two"], "--pack must be auto or a whole number of runs >= 1, got 'two'"),
    ("sweep.interventions", [*SWEEP, "--pack", "2"], "--pack 2: a shape (depth, condition) of the interventions "
     "grid has at most 1 run; use 1..1 or auto"),
    ("sweep.interventions", [*SWEEP, "--name", "a/b"], "got 'a/b'"),
    ("sweep.baseline", [*SWEEP, "--tracker", "nosuch"], "--tracker nosuch: choose from mlflow, wandb"),
    ("sweep.interventions", [*SWEEP, "--tracker", "mlflow,nosuch"], "--tracker nosuch: choose from mlflow, wandb"),
    ("sweep.demo", ["--tracker", "wandb", "--tracker", "nosuch"], "--tracker nosuch: choose from mlflow, wandb"),
    ("sweep.store", ["export", "--store", "{tmp}/empty-store", "--tracker", "nosuch"],
     "--tracker nosuch: choose from mlflow, wandb"),
    ("sweep.store", ["export", "--store", "{tmp}/empty-store"], "--tracker: give at least one tracker"),
    ("sweep.store", ["export", "--store", "{tmp}/no-store", "--tracker", "mlflow"], "no store there (nothing to export)"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json", "--actors", "0"], "--actors must be >= 1, got 0"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json", "--n-seqs", "0"], "--n-seqs must be >= 1, got 0"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json", "--seq-len", "1"], "--seq-len must be >= 2, got 1"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json", "--cpus-per-actor", "0"], "--cpus-per-actor must be > 0"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json", "--gpus-per-actor", "-0.5"], "--gpus-per-actor must be >= 0"),
    ("sweep.extension", [*EXT, "{tmp}/missing-path.json"], "no-such-model-dir is not an existing folder"),
    ("sweep.extension", [*EXT, "{tmp}/bad.json"], "bad.json is not valid JSON"),
    ("sweep.extension", [*EXT, "{tmp}/no-repo.json"], "give exactly one of 'repo' or 'path'"),
    ("sweep.extension", [*EXT, "{tmp}/nope.json"], "--manifest {tmp}/nope.json: no such file"),
    ("sweep.extension", ["--store", "{tmp}/store", "--text", "{tmp}/latin1.txt", "--manifest",
                         "{tmp}/missing-path.json", "--n-seqs", "0"], "--n-seqs must be >= 1"),
    ("sweep.report", ["--store", "{tmp}/no-store", "--out", "{tmp}/out"], "--store {tmp}/no-store: no store there"),
    ("sweep.report", ["--store", "{tmp}/empty-store", "--out", "foo://bucket/r"], "--out foo://bucket/r: cannot write"),
    ("sweep.store", ["validate", "--store", "{tmp}/no-store"], "--store {tmp}/no-store: no store there"),
    ("sweep.store", ["compact", "--store", "{tmp}/no-store"], "no store there"),
    ("sweep.browse", ["{tmp}/no-experiment"], "experiment {tmp}/no-experiment: no such folder"),
    ("sweep.browse", ["--storage", "{tmp}/empty-ray"], "no Tune experiment under"),
    ("sweep.browse", ["{tmp}/empty-ray"], "not a Tune experiment folder"),
    ("sweep.demo", ["--num-cpus", "0"], "--num-cpus must be >= 1, got 0"),
    ("sweep.demo", ["--address", "auto", "--num-cpus", "2"], "--num-cpus 2 sizes a local Ray"),
    ("sweep.demo", ["--out", "foo://x/y"], "--out foo://x/y: cannot write"),
    ("sweep.demo", ["--pack", "0", "--dry-run"], "--pack must be auto or a whole number of runs >= 1, got '0'"),
    ("sweep.demo", ["--pack", "7"], "--pack 7: a shape (depth, condition) of the interventions grid has at most 6"),
    ("sweep.demo", ["--quick", "--paper-depths"], "--quick and --paper-depths are two different tiers"),
    ("sweep.tiny_series", ["--out", "{tmp}/series", "--steps", "0", "-5"], "--steps must be >= 0, got -5"),
    ("sweep.tiny_series", ["--out", "{tmp}/series", "--layers", "0"], "--layers must be >= 1, got 0"),
    ("sweep.tiny_series", ["--out", "{tmp}/series", "--corpus", "{tmp}/latin1.txt"], "latin1.txt' is not UTF-8"),
    ("model.train", ["--depth", "0"], "--depth must be >= 1, got 0"),
    ("model.train", ["--d-model", "30", "--n-head", "4"], "--d-model 30 must be a multiple of --n-head 4"),
    ("model.train", ["--corpus", "{tmp}/short.txt"], "too short"),
    ("model.train", ["--corpus", "stdlib-docs", "--data-dir", "{tmp}"], "--data-dir"),
]


def _fill(argv: list[str], tmp: str) -> list[str]:
    return [a.replace("{tmp}", tmp) for a in argv]


@pytest.fixture
def no_ray(monkeypatch):
    """``ray.init`` fails the test: every case must stop before Ray starts."""
    if ray.is_initialized():
        ray.shutdown()

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init called for a bad input")

    monkeypatch.setattr(ray, "init", refuse)
    yield
    assert not ray.is_initialized()


@pytest.mark.parametrize(("module", "argv", "needle"), CASES)
def test_bad_input_is_one_line_and_exit_2(no_ray, files, capsys, module, argv, needle) -> None:
    tmp = files["tmp"]
    with pytest.raises(SystemExit) as exc:
        MODULES[module].main(_fill(argv, tmp))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exc.value.code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"python -m {module}: "), lines[0]
    assert needle.replace("{tmp}", tmp) in lines[0], lines[0]
    for made in ("store", "ray", "series", "out"):
        assert not (Path(tmp) / made).exists(), f"{made} created for a bad input"


PROCESS_CASES = [
    (["-m", "sweep.baseline", "--preset", "smoke", "--checkpoint-every", "0"],
     "python -m sweep.baseline: error: --checkpoint-every must be >= 1, got 0"),
    (["-m", "sweep.store", "validate", "--store", "{tmp}/no-store"], "python -m sweep.store: error: --store"),
    (["-m", "model.train", "--corpus", "{tmp}/latin1.txt"], "is not UTF-8: byte 0xe9 at byte offset 3"),
]


def _start_processes(root: Path) -> dict:
    """Every process case at once (each is seconds of imports; they overlap), each in its own
    folder of the user files with RAY_TMPDIR inside it: needle -> (folder, process)."""
    started = {}
    for i, (argv, needle) in enumerate(PROCESS_CASES):
        (root / f"case{i}").mkdir()
        tmp = _write_files(root / f"case{i}")["tmp"]
        env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(Path(tmp) / "ray_tmp"),
               "HF_HUB_OFFLINE": "1"}
        started[needle] = tmp, subprocess.Popen([sys.executable, *_fill(argv, tmp)], cwd=tmp, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return started


@pytest.fixture(scope="module")
def cli_processes(tmp_path_factory):
    started = _start_processes(tmp_path_factory.mktemp("cli"))
    yield started
    for _, proc in started.values():
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize(("argv", "needle"), PROCESS_CASES)
def test_cli_process_exits_2_with_one_line(cli_processes, argv, needle) -> None:
    tmp, proc = cli_processes[needle]
    assert proc.args[1:] == _fill(argv, tmp)
    stdout, stderr = proc.communicate(timeout=120)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert needle.replace("{tmp}", tmp) in done.stderr.strip().splitlines()[-1]
    assert not list(Path(tmp).glob("**/session_*")) and not (Path(tmp) / "runs").exists()


def test_debug_shows_the_traceback(no_ray, files) -> None:
    with pytest.raises(ValueError, match="--checkpoint-every"):
        baseline.main([*_fill(SWEEP, files["tmp"]), "--checkpoint-every", "0", "--debug"])


def test_list_flags_take_commas_and_spaces() -> None:
    a = baseline.parse(["--depths", "4,6", "8", "--seed-list", "1", "2,3", "--inits", "qk_identical"])
    from sweep.presets import preset_from_args

    p = preset_from_args(a, BASELINE_PRESETS)
    assert p.depths == (4, 6, 8) and p.seeds == (1, 2, 3) and p.inits == ("qk_identical",)


def test_help_shows_defaults_and_preset_shapes(capsys) -> None:
    with pytest.raises(SystemExit):
        baseline.parse(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 3)" in out and "(default: runs/store)" in out and "retry forever" in out
    assert f"demo: {BASELINE_PRESETS['demo'].train.epochs}" in out and "smoke: 2" in out  # the presets' epochs
    with pytest.raises(SystemExit):
        model_train._parse(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "demo shape" in out and "(default: 64)" in out


@pytest.mark.parametrize(("make", "error", "needle"), [
    (lambda: Preset("x", "baseline", "stdlib-docs", (1,), ("qk_identical",), ("a", "b")),
     ValueError, "Preset.seeds must hold integers, got 'a'"),
    (lambda: Preset("x", "baseline", "stdlib-docs", (1,), ("qk_identical",), (1,), data_dir="/d"),
     ValueError, "--corpus stdlib-docs ignores it"),
    (lambda: Store("s3://"), StoreError, "names no bucket"),
    (lambda: Store(None), StoreError, "must be a path or URI string"),
    (lambda: TrainConfig(batch_size="8"), ValueError, "TrainConfig.batch_size must be an integer"),
    (lambda: GPTConfig(n_layer=0), ValueError, "GPTConfig.n_layer must be a positive integer"),
])
def test_api_values_of_the_wrong_type(make, error, needle) -> None:
    with pytest.raises(error, match=needle):
        make()


def test_manifest_loader_can_require_local_paths(files) -> None:
    path = Path(files["tmp"]) / "missing-path.json"
    assert load_manifest(path).series[0].revisions[0].path.endswith("no-such-model-dir")
    with pytest.raises(ManifestError, match="no-such-model-dir is not an existing folder"):
        load_manifest(path, require_paths=True)
