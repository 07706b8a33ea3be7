"""model/trainer.py with one member (SPEC §3, §4.1): epoch reports, resume bit-identity, divergence, config,
optimiser; the values of the trainer it replaced (stored: ``fixtures/trainer_reference.json``, compared
within float32 rounding: ``stored_values.py``), and its checkpoints resume."""

from __future__ import annotations

import io
import json
import math
from functools import cache
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, tiny_corpus, tiny_model_cfg, tiny_train_cfg
from stored_values import RTOL, differences

from interventions import make_intervention
from model.recipe import TrainConfig
from model.report import EpochReport
from model.stack import Member
from model.trainer import Trainer
from sweep.store.schema import EPOCH_METRICS, LAYER_GRAD_METRICS, LAYER_METRICS

EPOCHS, STEPS, BATCH = 3, 5, 8
TOKENS_PER_EPOCH = STEPS * BATCH * CONTEXT


def make_trainer(epochs: int = EPOCHS, qk_init: str = "independent_xavier", **overrides) -> Trainer:
    cfg = tiny_train_cfg(epochs=epochs, steps_per_epoch=STEPS, lr=3e-3, seed=11, **overrides)
    return Trainer(tiny_model_cfg(), [Member(qk_init, 5, cfg)], tiny_corpus())


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def comparable(report: EpochReport) -> tuple:
    """A report without its timing columns."""
    run = {k: v for k, v in report.run.items() if k not in ("wall_s", "tokens_per_s")}
    return report.epoch, run, report.layers


@cache
def uninterrupted() -> tuple[dict[str, torch.Tensor], list[EpochReport], str]:
    trainer = make_trainer()
    reports: list[EpochReport] = []
    [status] = trainer.run(lambda _, r: reports.append(r))
    return params(trainer), reports, status


def test_on_epoch_sees_epoch_zero_then_every_epoch() -> None:
    _, reports, status = uninterrupted()
    assert status == "completed"
    assert [r.epoch for r in reports] == list(range(EPOCHS + 1))
    first = reports[0]
    assert first.run["train_loss"] is None and first.run["grad_norm"] is None
    assert first.run["tokens_seen"] == 0 and first.run["tokens_per_s"] is None
    assert [r.run["status"] for r in reports] == ["running"] * EPOCHS + ["completed"]
    for r in reports:
        assert r.run["tokens_seen"] == r.epoch * TOKENS_PER_EPOCH
    # at initialisation the model predicts nearly uniformly
    assert first.run["val_loss"] == pytest.approx(math.log(tiny_corpus().vocab_size), abs=0.1)
    # and it learns (lr 3e-3): validation loss falls, wall time accumulates
    assert reports[-1].run["val_loss"] < first.run["val_loss"] - 0.3
    walls = [r.run["wall_s"] for r in reports]
    assert walls[0] == 0.0 and all(b > a for a, b in zip(walls, walls[1:], strict=False))


def test_report_columns() -> None:
    _, reports, _ = uninterrupted()
    run_columns = set(EPOCH_METRICS) | {"tokens_seen", "status"}
    layer_columns = set(LAYER_METRICS) | set(LAYER_GRAD_METRICS) | {"layer"}
    for r in reports:
        assert run_columns <= set(r.run), run_columns - set(r.run)
        assert [row["layer"] for row in r.layers] == [0, 1]
        for row in r.layers:
            assert layer_columns <= set(row), layer_columns - set(row)
            for c in LAYER_METRICS:
                assert math.isfinite(row[c]), (r.epoch, c)
            for c in LAYER_GRAD_METRICS:
                if r.epoch == 0:
                    assert row[c] is None
                else:
                    assert math.isfinite(row[c]) and row[c] > 0
        if r.epoch > 0:
            for c in EPOCH_METRICS:
                assert math.isfinite(r.run[c]) and r.run[c] > 0, c


class _Stop(Exception):
    pass


@pytest.mark.parametrize("stop_at", [0, 1])
def test_resume_is_bit_identical(stop_at: int) -> None:
    full_params, full_reports, _ = uninterrupted()
    first = make_trainer()
    saved = io.BytesIO()

    def stop(_: int, report: EpochReport) -> None:
        if report.epoch == stop_at:
            torch.save(first.state_dict(), saved)  # as the trial does, inside on_epoch
            raise _Stop

    with pytest.raises(_Stop):
        first.run(stop)
    saved.seek(0)
    state = torch.load(saved, weights_only=False)
    torch.manual_seed(999)  # whatever the global RNG did meanwhile
    resumed = make_trainer()
    resumed.load_state_dict(state)
    assert resumed.epoch == stop_at and resumed.step == stop_at * STEPS
    reports: list[EpochReport] = []
    assert resumed.run(lambda _, r: reports.append(r)) == ["completed"]
    # a state saved at epoch 0 (step 0) reports epoch 0 again on resume, identically (the
    # store's writes are idempotent); a later state continues with the next epoch
    first_epoch = 0 if stop_at == 0 else stop_at + 1
    assert [r.epoch for r in reports] == list(range(first_epoch, EPOCHS + 1))
    resumed_params = params(resumed)
    assert resumed_params.keys() == full_params.keys()
    differ = [n for n in full_params if not torch.equal(full_params[n], resumed_params[n])]
    assert not differ, differ
    for mine, theirs in zip(reports, full_reports[first_epoch:], strict=True):
        assert mine.run["val_loss"] == theirs.run["val_loss"]
        assert comparable(mine) == comparable(theirs)


def test_a_trainer_without_resume_differs_with_another_batch_seed() -> None:
    """The resume test above can fail: another batch order gives other weights."""
    full_params, _, _ = uninterrupted()
    other = make_trainer(epochs=EPOCHS)
    other.samplers[0].load_state_dict({"generator": torch.Generator().manual_seed(12).get_state()})
    other.run()
    assert not torch.equal(params(other)["blocks.0.attn.k_proj.weight"], full_params["blocks.0.attn.k_proj.weight"])


@pytest.mark.parametrize("check_every", [1, 25])
def test_non_finite_loss_ends_the_run_as_diverged(check_every: int) -> None:
    trainer = make_trainer(check_every=check_every)
    reports: list[EpochReport] = []

    def poison(_: int, report: EpochReport) -> None:
        reports.append(report)
        if report.epoch == 0:
            with torch.no_grad():
                trainer.model.blocks[0].attn.v_proj.weight.fill_(float("nan"))

    assert trainer.run(poison) == ["diverged"]
    assert trainer.statuses == ["diverged"]
    assert [r.epoch for r in reports] == [0, 1]  # no epoch after the divergence
    last = reports[-1]
    assert last.run["status"] == "diverged"
    assert math.isnan(last.run["train_loss"])
    # the check runs every ``check_every`` steps, and at the end of the epoch
    steps = 1 if check_every == 1 else STEPS
    assert trainer.step == steps and last.run["tokens_seen"] == steps * BATCH * CONTEXT
    assert trainer.run() == ["diverged"]  # a diverged run stays stopped


@pytest.mark.parametrize("field,value", [
    ("lr", 0.0), ("batch_size", 0), ("eval_batches", 0), ("probe_seqs", -1), ("check_every", 0),
    ("epochs", -1), ("steps_per_epoch", 0), ("weight_decay", -0.1), ("grad_clip", 0.0),
    ("amp", "fp8"),
])
def test_train_config_validation(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_train_config_defaults_are_the_paper_recipe() -> None:
    cfg = TrainConfig()
    assert (cfg.lr, cfg.beta1, cfg.beta2, cfg.weight_decay, cfg.grad_clip, cfg.batch_size) == (
        1e-4, 0.9, 0.95, 0.1, 1.0, 64)
    assert TrainConfig(epochs=0).epochs == 0 and TrainConfig(steps_per_epoch=None).steps_per_epoch is None


def test_trainer_rejects_mismatched_vocab_and_unknown_init() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        Trainer(tiny_model_cfg(vocab_size=99), [Member("independent_xavier", 0, tiny_train_cfg())], tiny_corpus())
    with pytest.raises(ValueError, match="bogus"):
        Trainer(tiny_model_cfg(), [Member("bogus", 0, tiny_train_cfg())], tiny_corpus())


def test_weight_decay_only_on_matrices_and_embeddings() -> None:
    trainer = make_trainer()
    groups = trainer.optimizer.param_groups
    named = dict(trainer.model.named_parameters())
    by_id = {id(p): n for n, p in named.items()}
    decayed = [g for g in groups if g["weight_decay"] > 0]
    plain = [g for g in groups if g["weight_decay"] == 0]
    assert len(decayed) == 1 and decayed[0]["weight_decay"] == 0.1
    decay_names = {by_id[id(p)] for p in decayed[0]["params"]}
    plain_names = {by_id[id(p)] for g in plain for p in g["params"]}
    assert decay_names == {n for n, p in named.items() if p.dim() >= 2}
    assert plain_names == {n for n, p in named.items() if p.dim() < 2}
    assert "tok_emb.weight" in decay_names and "blocks.0.attn.q_proj.weight" in decay_names
    assert "blocks.0.attn.q_proj.bias" in plain_names and "blocks.0.ln1.weight" in plain_names
    # every parameter exactly once (the tied head is the embedding)
    all_params = [p for g in groups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params}) == len(named)
    for g in groups:
        assert g["lr"] == 3e-3 and g["betas"] == (0.9, 0.95)


# -- the trainer it replaced: same values, its checkpoints resume --------------------------------

#: the old one-run trainer's reports, stored once (how: the file's ``_how``) on another machine: compared
#: within float32 rounding (``stored_values``), never bit for bit
REFERENCE = Path(__file__).parent / "fixtures" / "trainer_reference.json"
TIMING = ("wall_s", "tokens_per_s")
NEWER = ("skipped_steps",)  # columns the trainer it replaced did not write
CONDITIONS = ("none", "forced_k_contraction", "freeze_k", "freeze_q", "qk_align_reg", "k_spectrum_clamp")


@cache
def _reference() -> dict:
    return json.loads(REFERENCE.read_text())


def _untimed(report: EpochReport) -> dict:
    """A report without its clock columns, as JSON gives it back (lists, not tuples)."""
    run = {k: v for k, v in report.run.items() if k not in TIMING + NEWER}
    return json.loads(json.dumps({"epoch": report.epoch, "run": run, "layers": report.layers}))


def _reference_of_this_torch() -> dict:
    """The stored reference, or a skip on another torch (``make test-floors``): another torch's kernels
    may compute another arithmetic, not only round differently."""
    ref = _reference()
    if ref["torch"].split("+")[0] != torch.__version__.split("+")[0]:
        pytest.skip(f"the reference values were made with torch {ref['torch']}; this is {torch.__version__}")
    return ref


def _reference_run(cond: str, **overrides) -> list[EpochReport]:
    """The stored run: tiny model, qk_identical, weight seed 4, 2 epochs of 5 steps, one condition."""
    cfg = tiny_train_cfg(epochs=2, seed=3, check_every=3, **overrides)
    mine: list[EpochReport] = []
    Trainer(tiny_model_cfg(), [Member("qk_identical", 4, cfg)], tiny_corpus(),
            lambda: make_intervention(cond)).run(lambda _, r: mine.append(r))
    return mine


@pytest.mark.stored
@pytest.mark.parametrize("cond", CONDITIONS)
def test_one_member_writes_the_values_of_the_trainer_it_replaced(cond: str, one_thread) -> None:
    """``--pack 1``: every run-level column and every probe row equal, within float32 rounding
    (``stored_values.RTOL``), what the one-run Trainer before the trainers became one reported on the
    machine that stored ``fixtures/trainer_reference.json``; twice on this machine, bit for bit."""
    mine = _reference_run(cond)
    assert differences([_untimed(r) for r in mine], _reference_of_this_torch()["conditions"][cond]) == []
    assert len(mine) == 3 and mine[-1].run["grad_norm"] > 0
    assert [r.run["skipped_steps"] for r in mine] == [None, 0, 0]  # no loss scaling on the CPU
    if cond == "none":  # bit-exactness belongs to one machine: the same run again, in this process
        assert [_untimed(r) for r in _reference_run(cond)] == [_untimed(r) for r in mine]


@pytest.mark.stored
def test_the_comparison_with_the_stored_reference_can_fail(one_thread) -> None:
    """A trainer whose learning rate is 1 % higher differs from the reference beyond float32 rounding
    (by ~7e-4 relative, against a tolerance of 2.4e-4); so does a value moved by 1e-3 of itself, while
    one moved by one float32 ulp does not."""
    ref = _reference_of_this_torch()["conditions"]["none"]
    higher = _reference_run("none", lr=tiny_train_cfg().lr * 1.01)
    assert differences([_untimed(r) for r in higher], ref) != []
    moved = json.loads(json.dumps(ref))
    v = moved[1]["run"]["val_loss"]
    moved[1]["run"]["val_loss"] = v * (1 + 2.0 ** -23)
    assert differences(moved, ref) == []
    moved[1]["run"]["val_loss"] = v * (1 + 1e-3)
    assert differences(moved, ref) == [f"$[1].run.val_loss: {v * (1 + 1e-3)!r} here, {v!r} stored "
                                       f"(|Δ| {v * 1e-3:.3g} > {RTOL * v * (1 + 1e-3):.3g})"]


def test_the_stored_reference_is_of_the_locked_torch() -> None:
    """The reference holds a report per epoch of each condition, made with the locked torch."""
    ref = _reference()
    lock = (Path(__file__).parent.parent / "requirements.lock").read_text()
    assert f"torch=={ref['torch'].split('+')[0]}" in lock.splitlines()
    assert sorted(ref["conditions"]) == sorted(CONDITIONS)


def test_a_difference_column_is_compared_relative_to_its_operands() -> None:
    """pr_q − pr_k ≈ 0.003 from two values near 8.8: a shift of 1e-6 is float32 rounding of its
    operands, not a 3e-4 relative change; a shift of 1e-2 is a difference."""
    row = {"pr_q": 8.8043, "pr_k": 8.8013, "pr_q_minus_pr_k": 0.003}
    assert differences({**row, "pr_q_minus_pr_k": 0.003 + 1e-6}, row) == []
    assert differences({**row, "pr_q_minus_pr_k": 0.013}, row) != []
    assert differences({**row, "pr_q_minus_pr_k": None}, row) != []
    assert differences({**row, "pr_q": 8.8043 * (1 + 1e-3)}, row) != []


def test_a_checkpoint_of_the_trainers_before_they_became_one_is_refused_in_one_line() -> None:
    """Their layout (one run's ``sampler``/``status``, no ``statuses``) no longer loads (SPEC §3)."""
    trainer = Trainer(tiny_model_cfg(), [Member("qk_identical", 4, tiny_train_cfg(epochs=1, seed=3))], tiny_corpus(),
                      lambda: make_intervention("none"))
    old = {k: v for k, v in trainer.state_dict().items() if k not in ("samplers", "statuses")}
    with pytest.raises(ValueError, match="before they became one"):
        trainer.load_state_dict({**old, "sampler": {}, "status": "running"})


def test_a_pack_decays_by_role_and_its_layers_say_how_many_members_they_hold() -> None:
    ms = [Member("qk_identical", s, tiny_train_cfg()) for s in (1, 2, 3)]
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus())
    by_id = {id(p): n for n, p in pack.model.named_parameters()}
    decayed = {by_id[id(p)] for g in pack.optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    one = make_trainer()
    expected = {by_id_name for g in one.optimizer.param_groups if g["weight_decay"] > 0
                for by_id_name in ({n for n, p in one.model.named_parameters() if p is q} for q in g["params"])
                for by_id_name in by_id_name}
    assert decayed == expected and "blocks.0.ln1.weight" not in decayed  # a stacked gain is 2-D: [3, d]
    assert pack.params["blocks.0.ln1.weight"].shape == (3, 32)
    assert "members=3, in_features=32, out_features=32" in repr(pack.model.blocks[0].attn.q_proj)
    assert "members=3, (32,)" in repr(pack.model.blocks[0].ln1)
    assert "members=3" in repr(pack.model.tok_emb) and "members" not in repr(one.model)
