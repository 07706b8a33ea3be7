"""sweep/trial/spec.py: the run spec is built and checked once in the driver, crosses into Tune as plain
data, and is read back in the trial without re-running a check; version 1 configs (experiments
started before the spec) still decode; other versions are refused with one line naming them."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
from sweep_helpers import v1_config

from model.gpt import GPTConfig
from model.plugins import Plugins
from model.recipe import TrainConfig
from sweep import baseline, interventions
from sweep.placement.packing import plan_packs
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS, Preset, preset_from_args
from sweep.trial.options import TrialOptions
from sweep.trial.spec import (
    SPEC_VERSION,
    RunIdentity,
    SpecError,
    TrialSpec,
    cell_of,
    check_versions,
    decode,
    plugins_of,
    runs_of,
    version_of,
)

OPTIONS = TrialOptions("/abs/store", "/abs/ray", cpus_per_trial=2.0, gpus_per_trial=0.25, checkpoint_every=3)
PLUGINS = Plugins(("tests.plugin_toy",))
VOCAB = 97
DOSE = ["--strengths", "forced_k_contraction.lam=0,0.05,0.2"]


def everything(_: str) -> bool:
    return True


def plans():
    """(preset, packs) for every preset, unpacked and packed, and a dose-response grid."""
    dose = preset_from_args(interventions.parse(["--preset", "smoke", *DOSE]), INTERVENTION_PRESETS)
    presets = [*BASELINE_PRESETS.values(), *INTERVENTION_PRESETS.values(), dose]
    for p in presets:
        for request in (1, "auto"):
            yield p, plan_packs(p.cells(), request, cluster_gpus=1, packable=everything)[0]


def _config(spec: TrialSpec) -> dict:
    return {"spec": spec.to_config()}  # what Tune hands the trial (runner.py's param_space)


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def test_every_trial_of_every_preset_round_trips_as_plain_data() -> None:
    for preset, packs in plans():
        for pack in packs:
            spec = TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS)
            config = _config(spec)
            assert _plain(config), config
            assert decode(config, VOCAB) == spec
            assert [asdict(r) for r in runs_of(config)] == [c.identity() for c in pack.cells]
            assert spec.model == preset.model_config(pack.depth, VOCAB)
            for run, cell in zip(spec.runs, pack.cells, strict=True):
                assert spec.run_train(run, "cpu") == replace(preset.train_config(cell.seed, "cpu"), compile=False)
                assert run.row()["run_id"] == cell.run_id


def test_a_pack_cell_lists_its_members() -> None:
    (pack, *_), _ = plan_packs(BASELINE_PRESETS["paper"].cells(), "auto", 1, packable=everything)
    cell = cell_of(_config(TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS)))
    assert cell["pack"] == 12 and cell["seed"] == "37,42,105,210" and cell["depth"] == 8  # longest first
    one = cell_of(_config(TrialSpec.of(plan_packs(pack.cells, 1, 0)[0][0], OPTIONS, VOCAB, PLUGINS)))
    assert "pack" not in one and one["seed"] == 37 and one["condition"] == "none"


def test_the_trial_reads_the_spec_without_running_a_check(monkeypatch) -> None:
    """The driver checked the values; the decode must not check them again (nor build a Preset)."""
    (pack, *_), _ = plan_packs(INTERVENTION_PRESETS["demo"].cells(), "auto", 1, packable=everything)
    spec = TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS)
    config = _config(spec)

    def checked(self) -> None:
        raise AssertionError(f"{type(self).__name__} checked again in the trial")

    for cls in (Preset, GPTConfig, TrainConfig, TrialOptions):
        monkeypatch.setattr(cls, "__post_init__", checked)
    back = decode(config, VOCAB)
    assert back == spec and back.run_train(back.runs[1], "cpu").seed == pack.cells[1].seed


def test_epochs_is_checked_once_by_its_flag_and_once_by_the_recipe(monkeypatch) -> None:
    """``--epochs`` from the command line to the trainer: the flag's check (one line naming it) and
    ``TrainConfig``'s own when the preset's recipe is built; none in the spec, the trial or per run."""
    calls = []
    original = TrainConfig.__post_init__

    def counted(self) -> None:
        calls.append(self.epochs)
        original(self)

    monkeypatch.setattr(TrainConfig, "__post_init__", counted)
    preset = preset_from_args(baseline.parse(["--preset", "smoke", "--epochs", "7"]), BASELINE_PRESETS)
    packs, _ = plan_packs(preset.cells(), "auto", 1, packable=everything)
    for pack in packs:
        spec = decode(_config(TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS)), VOCAB)
        assert {spec.run_train(r, "cpu").epochs for r in spec.runs} == {7}
    assert calls == [7]
    with pytest.raises(ValueError, match="--epochs must be >= 1, got 0"):
        preset_from_args(baseline.parse(["--preset", "smoke", "--epochs", "0"]), BASELINE_PRESETS)


# --- experiments started before the run spec (version 1) -----------------------------------


def test_a_version_1_config_decodes_to_the_same_runs() -> None:
    for _, packs in plans():
        for pack in packs:
            old = v1_config(pack.cells, OPTIONS, PLUGINS)
            assert version_of(old) == 1 and plugins_of(old) == PLUGINS
            spec = TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS)
            back = decode(old, VOCAB)
            assert back == replace(spec, version=1)
            assert runs_of(old) == spec.runs
            assert cell_of(old) == {k: v for k, v in spec.cell().items()}


def test_other_versions_are_refused_naming_the_version() -> None:
    (pack, *_), _ = plan_packs(BASELINE_PRESETS["smoke"].cells(), 1, 0)
    new = _config(TrialSpec.of(pack, OPTIONS, VOCAB, PLUGINS))
    future = {"spec": {**new["spec"], "version": SPEC_VERSION + 1}}
    with pytest.raises(SpecError, match=f"run spec version {SPEC_VERSION + 1}, which this qkgeom cannot read"):
        decode(future, VOCAB)
    with pytest.raises(SpecError, match=f"written with run spec version {SPEC_VERSION + 1}.*another --name"):
        check_versions([new, future], "/x/exp")
    assert check_versions([new, v1_config(pack.cells, OPTIONS, PLUGINS)], "/x/exp") == 1
    assert check_versions([new], "/x/exp") == SPEC_VERSION
    with pytest.raises(SpecError, match="97 symbols but the corpus given to the sweep has 50"):
        decode(new, 50)
    odd = {"spec": {**new["spec"], "runs": [{**new["spec"]["runs"][0], "extra": 1}]}}
    with pytest.raises(SpecError, match="RunIdentity .* other fields .*extra"):
        decode(odd, VOCAB)


def test_run_identity_row_is_the_store_identity() -> None:
    """The row's keys are exactly the store's run identity columns, and ``strengths``."""
    from sweep.store.schema import RUN_IDENTITY

    cell = BASELINE_PRESETS["smoke"].cells()[0]
    assert list(RunIdentity(**cell.identity()).row()) == [f.name for f in RUN_IDENTITY] + ["strengths"]
