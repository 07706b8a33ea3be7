"""Extending the study from outside the package: a toy regime and condition, and ``--plugin``.

1. registered from this file alone, a toy regime and condition run preset → Trainer →
   store rows → report, and the tables and figure legends show their labels;
2. a store holding names no registry knows still gives a report that lists them;
3. ``--plugin tests.plugin_toy`` works in Ray's trial workers for baseline and interventions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest
from helpers import tiny_corpus
from sweep_helpers import assert_store_complete, dirs
from torch import nn

from interventions import CONTROL, Intervention, make_intervention, register
from model.plugins import PluginError, Plugins, load_plugins, preload
from model.qk_init import DEFAULT_INIT, register_init
from model.stack import Member
from model.trainer import Trainer
from sweep import report
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS, Preset
from sweep.report import figures as fg
from sweep.store import Store
from sweep.synthetic import make_synthetic_store
from sweep.trial.spec import RunIdentity

SMOKE = BASELINE_PRESETS["smoke"]


def _register_toys() -> tuple[str, str]:
    @register_init("toy_scaled_copy", label="Toy Scaled Copy", coupled=False)
    def toy_scaled_copy(wq, wk, gen):
        wq.normal_(0.0, 0.02, generator=gen)
        wk.copy_(-wq)

    @register
    @dataclass
    class ToyFreezeV(Intervention):
        name: ClassVar[str] = "toy_freeze_v"
        label: ClassVar[str] = "Toy: V frozen"
        predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1}

        def trainable(self, name: str, param: nn.Parameter) -> bool:
            return ".v_proj." not in name

    return "toy_scaled_copy", ToyFreezeV.name


def _run_preset(preset: Preset, store: Store) -> None:
    """What ``sweep.trial.trainable.train_cell`` does, without Ray: every cell through the Trainer into the store."""
    corpus = tiny_corpus()
    for cell in preset.cells():
        trainer = Trainer(preset.model_config(cell.depth, corpus.vocab_size),
                          [Member(cell.init, cell.seed, preset.train_config(cell.seed, "cpu"))], corpus,
                          lambda cell=cell: make_intervention(cell.condition))
        identity = RunIdentity(**cell.identity()).row()

        def on_epoch(_, r, identity=identity):
            if r.layers:
                store.write_layers([{**identity, "epoch": r.epoch, **row} for row in r.layers])
            store.write_epoch({**identity, "epoch": r.epoch, **r.run})

        trainer.run(on_epoch)


def test_toy_regime_and_condition_reach_the_report(registries, tmp_path, monkeypatch):
    toy_init, toy_cond = _register_toys()
    shape = dict(depths=(2,), seeds=(1, 2), train=replace(SMOKE.train, epochs=2, steps_per_epoch=2))
    base = replace(SMOKE, inits=(toy_init, DEFAULT_INIT), **shape)
    iv = replace(INTERVENTION_PRESETS["smoke"], inits=(toy_init,), conditions=(CONTROL, toy_cond), **shape)
    store = Store(str(tmp_path / "store"))
    _run_preset(base, store)
    _run_preset(iv, store)

    legends: list[str] = []
    save = fg._save

    def spy(fig, out, name):  # every legend entry of every figure drawn
        for leg in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
            if leg is not None:
                legends.extend(t.get_text() for t in leg.get_texts())
        return save(fig, out, name)

    monkeypatch.setattr(fg, "_save", spy)
    s = report.build_report(report.load_tables(store.base), tmp_path / "out")

    t3 = pd.read_csv(tmp_path / "out" / "tables" / "table3_alignment.csv").set_index("init")
    assert t3.loc[toy_init, "label"] == "Toy Scaled Copy"
    t5 = pd.read_csv(tmp_path / "out" / "tables" / "table5_deltas.csv").set_index("condition")
    assert t5.loc[toy_cond, "label"] == "Toy: V frozen"
    assert t5.loc[toy_cond, "predicted"] == "attn_entropy +"  # read from the class, nowhere else
    assert s["interventions"][toy_cond]["predicted"] == {"attn_entropy": "+"}
    assert any(text.startswith("Toy Scaled Copy") for text in legends), legends
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Toy Scaled Copy" in md and "Toy: V frozen" in md and "unknown names" not in md
    assert s["unknown_names"] == {"inits": [], "conditions": []}


def test_report_on_unknown_names_lists_them(tmp_path):
    tables = make_synthetic_store(n_seeds=2, depths=(2,), epochs=3, iv_seeds=(7, 37), iv_epochs=2,
                                  checkpoints=False)
    for t in ("layers", "epochs"):
        df = tables[t]
        df["init"] = df["init"].replace(DEFAULT_INIT, "someones_regime")
        df["condition"] = df["condition"].replace("freeze_q", "someones_condition")
    s = report.build_report(tables, tmp_path, figures=False)
    assert s["unknown_names"] == {"inits": ["someones_regime"], "conditions": ["someones_condition"]}
    md = (tmp_path / "report.md").read_text()
    assert "unknown names" in md and "someones_regime" in md and "someones_condition" in md
    assert fg.color("someones_regime") == "#7f7f7f" and fg.label("someones_regime") == "someones_regime"


def test_plugin_that_cannot_be_imported_is_one_clear_error(capsys):
    with pytest.raises(PluginError, match="--plugin no_such_plugin_module: cannot import"):
        load_plugins(["no_such_plugin_module"])
    with pytest.raises(SystemExit) as exc:
        preload(["--preset", "smoke", "--plugin", "no_such_plugin_module"], "python -m sweep.baseline")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m sweep.baseline: error: --plugin no_such_plugin_module: cannot import")
    assert len(err.splitlines()) == 1


def test_plugin_names_are_valid_inputs(registries):
    from sweep import baseline
    from sweep.cli import flatten

    args = baseline.parse(["--preset", "smoke", "--inits", "plugin_half_copy", "--plugin", "tests.plugin_toy"])
    # --inits is nargs="+" (one tuple per word, joined by preset_from_args since 53be638)
    assert args.plugin == ["tests.plugin_toy"] and flatten(args.inits) == ("plugin_half_copy",)


def test_trials_and_probe_actors_get_the_same_plugins_value(registries):
    """One carrier: ``Plugins`` from the flags, in every trial's run spec and in the actors' settings."""
    from sweep import baseline
    from sweep.driver.settings import settings_from_args
    from sweep.extension import cli as extension
    from sweep.placement.packing import plan_packs
    from sweep.presets import BASELINE_PRESETS, preset_from_args
    from sweep.trial.options import TrialOptions
    from sweep.trial.spec import TrialSpec, decode

    plugin = ["--plugin", "tests.plugin_toy"]
    sweep = settings_from_args(baseline.parse(["--preset", "smoke", *plugin]), "x")
    probe = extension.settings_from_args(extension.parse_args(["--manifest", "m.json", *plugin])).probe
    assert sweep.plugins == probe.plugins == Plugins(("tests.plugin_toy",))
    assert not hasattr(TrialOptions, "plugins")  # not an option of the trial: the spec's own field
    cells = preset_from_args(baseline.parse(["--preset", "smoke"]), BASELINE_PRESETS).cells()
    spec = TrialSpec.of(plan_packs(cells, 1, 0)[0][0], sweep.trial, 50, sweep.plugins)
    assert decode({"spec": spec.to_config()}, 50).plugins == probe.plugins


# --- the plugin in Ray's trial workers ---------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray(ray_env):
    import ray

    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.mark.ray
def test_plugin_in_ray_workers_baseline_interventions_report(local_ray, registries, tmp_path):
    from sweep import baseline, interventions

    plugin = ["--plugin", "tests.plugin_toy"]  # imported first by each trial process (TrialSpec.plugins)
    summary = baseline.main(["--preset", "smoke", "--inits", "plugin_half_copy", "--depths", "1",
                             *plugin, *dirs(tmp_path, "plugin-baseline")])
    assert summary["status"].tolist() == ["completed"], summary
    summary = interventions.main(["--preset", "smoke", "--conditions", "none,plugin_freeze_v", *plugin,
                                  *dirs(tmp_path, "plugin-interventions")])
    assert sorted(summary["condition"]) == ["none", "plugin_freeze_v"], summary
    assert (summary["status"] == "completed").all(), summary
    store = Store(str(tmp_path / "store"))
    ly = store.read("layers")
    assert set(ly["init"]) == {"plugin_half_copy", DEFAULT_INIT}
    assert set(ly["condition"]) == {"none", "plugin_freeze_v"}
    report.main(["--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--no-figures", *plugin])
    md = Path(tmp_path / "out" / "report.md").read_text()
    assert "Plugin Half Copy" in md and "Plugin: freeze V" in md and "unknown names" not in md
    assert_store_complete(store, runs=3, epochs=SMOKE.train.epochs,
                          layer_rows=(SMOKE.train.epochs + 1) * (1 + 2 * INTERVENTION_PRESETS["smoke"].depths[0]))
