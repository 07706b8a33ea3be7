"""sweep/trial/gpu_flags.py: --amp, --graphs, --tf32 on every sweep command and model.train, carried to the
trial in its run spec; a spec written before the fields decodes with the values those trials had."""

from __future__ import annotations

import pytest

from model.plugins import Plugins
from sweep import baseline, interventions
from sweep.driver.settings import settings_from_args
from sweep.placement.packing import plan_packs
from sweep.presets import BASELINE_PRESETS
from sweep.trial.options import TrialOptions
from sweep.trial.spec import TrialSpec, decode


@pytest.mark.parametrize("command", [baseline, interventions])
def test_every_sweep_takes_the_flags_into_its_trial_options(command) -> None:
    args = command.parse(["--preset", "smoke", "--amp", "fp16", "--no-graphs", "--no-tf32"])
    trial = settings_from_args(args, "x").trial
    assert (trial.amp, trial.graphs, trial.tf32) == ("fp16", False, False)
    default = settings_from_args(command.parse(["--preset", "smoke"]), "x").trial
    assert (default.amp, default.graphs, default.tf32) == ("auto", True, True)


def test_a_bad_amp_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        baseline.parse(["--preset", "smoke", "--amp", "fp8"])
    assert exc.value.code == 2 and "--amp: invalid choice: 'fp8'" in capsys.readouterr().err


def test_model_train_has_the_same_flags() -> None:
    from model.train import _parse

    args = _parse(["--amp", "bf16", "--no-graphs", "--no-tf32", "--condition", "freeze_k"])
    assert (args.amp, args.graphs, args.tf32, args.condition) == ("bf16", False, False, "freeze_k")


def test_the_options_travel_in_the_spec_to_the_runs_recipe() -> None:
    (pack, *_), _ = plan_packs(BASELINE_PRESETS["smoke"].cells(), 1, 0)
    options = TrialOptions("/s", "/r", amp="fp16", graphs=False, tf32=False)
    spec = TrialSpec.of(pack, options, 97, Plugins())
    back = decode({"spec": spec.to_config()}, 97)
    assert back.options == options
    assert back.run_train(back.runs[0], "cpu").amp == "fp16"
    assert '"amp": "fp16"' in spec.run_rows("e", "t")[0]["train"]  # the runs table records it
    older = spec.to_config()
    for key in ("amp", "graphs", "tf32"):  # a spec written before these options
        del older["options"][key]
    before = decode({"spec": older}, 97)
    assert (before.options.amp, before.options.graphs, before.options.tf32) == ("auto", True, True)
    assert before.run_train(before.runs[0], "cpu").amp == "auto"
