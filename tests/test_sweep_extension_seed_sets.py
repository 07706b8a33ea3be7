"""sweep.extension.seed_sets: sets of seeds from the Hub's listing (faked here; the local test Hub in
test_sweep_extension_suite.py), every seed at the same revisions; and the manifest's ``group`` / ``seed``."""

from __future__ import annotations

import json

import pytest

from sweep.extension.checkpoint_series import (
    ManifestError,
    load_manifest,
    parse_manifest,
    write_manifest,
)
from sweep.extension.seed_sets import SET_ALIASES, SETS, expand_selection, set_entries, unpaired

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + [1000 * k for k in range(1, 144)]


def listing(seeds: dict[str, list[int]], lacks: dict[str, set[int]] | None = None):
    """Fake hub: the author's models (search by substring) and each repo's step branches (``lacks``: steps
    a repo does not have)."""
    lacks = lacks or {}

    def models(author: str, search: str) -> list[str]:
        return [f"{author}/{name}" for name in seeds if search in name]

    def branches(repo: str) -> list[str]:
        name = repo.split("/", 1)[1]
        return ["main"] + [f"step{k}" for k in seeds.get(name, STEPS) if k not in lacks.get(name, set())]

    return models, branches


def test_a_polypythias_set_is_the_original_and_its_listed_seeds_at_the_same_revisions() -> None:
    hub = {f"pythia-160m-seed{k}": STEPS for k in range(1, 10)} | {"pythia-160m-weight-seed1": STEPS}
    models, branches = listing(hub, lacks={"pythia-160m-seed4": {143000, 512}, "pythia-160m": {1000}})
    plan = set_entries(SETS["polypythias-160m"], 6, branches, models)
    assert [(e.name, e.seed, e.group, e.varies) for e in plan.entries] == [
        ("pythia-160m", "0", "polypythias-160m", "seed"),
        *[(f"pythia-160m-seed{k}", str(k), "polypythias-160m", "seed") for k in range(1, 10)]]
    picked = {tuple(r.step for r in e.revisions) for e in plan.entries}
    assert len(picked) == 1  # one pick for the set: every seed at the same steps
    (steps,) = picked
    assert len(steps) == 6 and steps[0] == 0 and steps[-1] == 142000  # 143000 is missing in seed 4
    assert not {512, 1000} & set(steps)
    first = plan.entries[0].revisions
    assert [(r.revision, r.repo, r.tokens) for r in first][-1] == ("step142000", "EleutherAI/pythia-160m",
                                                                   142000 * 2_097_152)
    assert plan.notes == [
        "set polypythias-160m: pythia-160m (seed 0) lacks step 1000: only steps every seed has are picked",
        "set polypythias-160m: pythia-160m-seed4 (seed 4) lacks step 512, step 143000: only steps every seed "
        "has are picked"]


def test_the_listing_decides_how_many_seeds_a_set_has() -> None:
    """The variants' count is the Hub's: two listed, the third the model cards name is reported absent;
    a fourth the sources do not know is taken."""
    models, branches = listing({"pythia-160m-data-seed1": STEPS, "pythia-160m-data-seed2": STEPS,
                                "pythia-160m-data-seed4": STEPS, "pythia-160m-weight-seed1": STEPS})
    plan = set_entries(SETS["polypythias-160m-data-seed"], 3, branches, models)
    assert [(e.name, e.seed, e.varies) for e in plan.entries] == [
        ("pythia-160m-data-seed1", "1", "data order"), ("pythia-160m-data-seed2", "2", "data order"),
        ("pythia-160m-data-seed4", "4", "data order")]  # no original: it shares the fixed factor
    assert plan.notes == ["set polypythias-160m-data-seed: the Hub lists no seed 3 (the sources name seeds 1, 2, 3): "
                          "probing the 3 series it lists"]
    with pytest.raises(ValueError, match="lists no repository matching"):
        set_entries(SETS["polypythias-160m-weight-seed"], 3, *listing({})[::-1])


def test_polypythias_names_the_five_sets_and_a_series_in_a_set_is_probed_once() -> None:
    assert SET_ALIASES["polypythias"] == tuple(f"polypythias-{s}" for s in ("14m", "31m", "70m", "160m", "410m"))
    hub = {f"pythia-{size}-seed{k}": STEPS for size in ("14m", "31m", "70m", "160m", "410m") for k in (1, 2)}
    models, branches = listing(hub)
    manifest, notes = expand_selection(["polypythias", "pythia-160m"], 3, branches, models, lambda r, v: None)
    assert len(manifest.series) == 5 * 3 and len(notes) == 5  # seeds 3-9 absent from this listing
    by_name = {s.name: s for s in manifest.series}
    assert (by_name["pythia-160m"].group, by_name["pythia-160m"].seed) == ("polypythias-160m", "0")
    with pytest.raises(ValueError, match="unknown series or set 'polypythias-1b'"):
        expand_selection(["polypythias-1b"], 3, branches, models)


SET = [{"name": f"s{k}", "group": "toy", "seed": k, "revisions": [{"revision": "step1", "repo": "a/b"}]}
       for k in range(3)]


def test_a_manifest_declares_sets_and_round_trips(tmp_path) -> None:
    data = {"series": [*SET, {"name": "alone", "revisions": [{"revision": "step1", "repo": "a/c"}]},
                       {"name": "w1", "group": "toy-w", "seed": "w1", "varies": "weights",
                        "revisions": [{"revision": "step1", "repo": "a/d"}, {"revision": "step2", "repo": "a/d"}]}]}
    m = parse_manifest(data)
    assert [(s.group, s.seed, s.varies) for s in m.series] == [
        ("toy", "0", "seed"), ("toy", "1", "seed"), ("toy", "2", "seed"), (None, None, None),
        ("toy-w", "w1", "weights")]
    write_manifest(m, tmp_path / "m.json")
    assert load_manifest(tmp_path / "m.json") == m
    assert "group" not in json.loads((tmp_path / "m.json").read_text())["series"][3]
    assert unpaired(m) == []
    skewed = parse_manifest({"series": [*SET[:2], {**SET[2], "revisions": [{"revision": "step2", "repo": "a/b"}]}]})
    assert unpaired(skewed) == ["[extension] warning: set toy: its seeds are not at the same revisions (seed 0 lacks "
                                "2; seed 1 lacks 2; seed 2 lacks 1); Appendix A pairs them on the 0 every seed has"]


@pytest.mark.parametrize(("series", "message"), [
    ([{**SET[0], "group": ""}], r"series\[0\].group must be a non-empty string"),
    ([{k: v for k, v in SET[0].items() if k != "seed"}], r"series\[0\].seed must be"),
    ([{k: v for k, v in SET[0].items() if k != "group"}], r"series\[0\].group must be"),
    ([{**SET[0], "seed": -1}], "seed must be a non-negative integer"),
    ([{**SET[0], "seed": True}], "seed must be"),
    ([{**SET[0], "varies": "moon phase"}], "varies must be one of 'seed', 'weights', 'data order'"),
    ([{"name": "a", "varies": "weights", "revisions": SET[0]["revisions"]}], "varies needs a 'group'"),
    ([SET[0], {**SET[1], "seed": 0}], "set 'toy' has seed '0' twice"),
    ([SET[0], {**SET[1], "varies": "weights"}], "set 'toy' says its seeds vary seed and weights"),
])
def test_a_manifest_set_error_names_the_field(series, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest({"series": series})


def test_a_revision_stored_before_its_set_is_labelled_when_skipped(tmp_path) -> None:
    """pythia-160m probed alone (the paper's run) and then as seed 0 of polypythias-160m: its stored
    revisions are skipped, not probed again, and get the set's labels (a series is in one set)."""
    from dataclasses import replace

    from sweep.extension.revision_probe import Job, checkpoint_rows
    from sweep.extension.seed_sets import label_sets
    from sweep.store import Store

    store = Store(str(tmp_path / "store"))
    alone = [Job("pythia-160m", f"step{k}", "EleutherAI/pythia-160m", None, k, k, k / 2) for k in (0, 1, 2)]
    layers = [{"layer": i, "pr_q": 2.0, "pr_k": 1.0, "pr_q_minus_pr_k": 1.0, "qk_erank": 1.0, "attn_entropy": 1.0,
               "attn_top1": 0.5, "attn_erank": 1.0, "logit_std": 1.0} for i in (0, 1)]
    for job in alone[:2]:
        store.write_checkpoint(checkpoint_rows(job, layers))
    store.write_checkpoint(checkpoint_rows(alone[2], None, "RevisionError: gone"))
    in_set = [replace(j, group="polypythias-160m", seed="0", varies="seed") for j in alone[:2]]
    assert label_sets(store, in_set) == 2
    df = store.read("checkpoints")
    labelled = df[df["revision"].isin(["step0", "step1"])]
    assert len(labelled) == 4 and (labelled["group"] == "polypythias-160m").all() and (labelled["seed"] == "0").all()
    assert df.loc[df["revision"] == "step2", "group"].isna().all()  # not in the jobs: untouched
    assert (labelled["pr_q"] == 2.0).all() and label_sets(store, in_set) == 0
