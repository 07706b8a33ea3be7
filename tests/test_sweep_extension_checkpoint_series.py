"""sweep.extension.checkpoint_series: the registry, revision selection and the manifest (no network)."""

from __future__ import annotations

import json
import math

import pytest

from sweep.extension.checkpoint_series import (
    SERIES,
    Manifest,
    ManifestError,
    build_manifest,
    list_step_revisions,
    load_manifest,
    nanotron_tokens_per_step,
    parse_manifest,
    parse_step,
    select_log_uniform,
    write_manifest,
)

PYTHIA_BRANCHES = (
    ["main", "step0"] + [f"step{2**i}" for i in range(10)] + [f"step{k * 1000}" for k in range(1, 144)]
)


def test_registry_has_the_seven_paper_series_and_the_large_pythias() -> None:
    from sweep.extension.checkpoint_series import default_series

    assert default_series() == ["gpt2-small", "pythia-70m", "pythia-160m", "pythia-410m",
                                "smollm2-135m", "smollm2-360m", "olmo-1b"]
    from analysis.reference import PAPER_SERIES

    assert list(PAPER_SERIES) == default_series()  # the report names the paper's series from it
    assert set(SERIES) - set(default_series()) == {"pythia-14m", "pythia-31m", "pythia-1.4b", "pythia-2.8b",
                                                   "pythia-6.9b", "pythia-12b"}
    assert SERIES["pythia-12b"].repo == "EleutherAI/pythia-12b" and SERIES["pythia-12b"].tokens_per_step == 2_097_152
    assert SERIES["gpt2-small"].repo == "stanford-crfm/alias-gpt2-small-x21"
    assert SERIES["gpt2-small"].tokens_per_step == 524_288
    assert SERIES["pythia-410m"].tokens_per_step == 2_097_152
    assert SERIES["smollm2-135m"].tokens_per_step == 1_048_576
    assert SERIES["smollm2-360m"].tokens_per_step is None  # read from the repository's config
    assert SERIES["olmo-1b"].endpoint_only == "main"
    assert {s.architecture for s in SERIES.values()} == {"gpt2", "gpt_neox", "llama", "olmo"}


@pytest.mark.parametrize(("name", "step"), [
    ("step1000", 1000), ("step-240000", 240000), ("checkpoint-400000", 400000),
    ("step20000-tokens84B", 20000), ("local-step0", 0), ("main", None),
])
def test_parse_step(name: str, step: int | None) -> None:
    assert parse_step(name) == step


def test_branches_are_matched_never_built() -> None:
    branches = ["main", "checkpoint-0", "checkpoint-10", "checkpoint-1950", "step-5", "refs/pr/1"]
    assert list_step_revisions(SERIES["gpt2-small"], branches) == [
        (0, "checkpoint-0"), (10, "checkpoint-10"), (1950, "checkpoint-1950")]
    assert list_step_revisions(SERIES["smollm2-135m"], ["step-240000", "step240000", "main"]) == [
        (240000, "step-240000")]
    # a missing branch is simply not offered
    assert 143000 not in dict(list_step_revisions(SERIES["pythia-160m"], PYTHIA_BRANCHES[:-1]))


def test_log_uniform_selection() -> None:
    steps = [s for s, _ in list_step_revisions(SERIES["pythia-70m"], PYTHIA_BRANCHES)]
    picked = select_log_uniform(steps, 8)
    assert len(picked) == 8 and picked[0] == 0 and picked[-1] == 143000
    assert picked == sorted(set(picked))
    gaps = [math.log1p(b) - math.log1p(a) for a, b in zip(picked, picked[1:], strict=False)]
    assert max(gaps) < 2.5 * min(gaps)  # spread evenly in log(1 + step)
    assert select_log_uniform([5, 1, 3], 10) == [1, 3, 5]
    assert select_log_uniform(steps, 1) == [143000]


def test_build_manifest_with_a_fake_hub() -> None:
    def branches(repo: str) -> list[str]:
        assert repo in {"EleutherAI/pythia-70m", "HuggingFaceTB/SmolLM2-360M-intermediate-checkpoints"}
        return PYTHIA_BRANCHES if "pythia" in repo else ["main"] + [f"step-{160000 * k}" for k in range(1, 9)]

    manifest = build_manifest(["pythia-70m", "olmo-1b", "smollm2-360m"], 4, branches,
                              tokens_per_step=lambda repo, rev: None)
    pythia, olmo, smol = manifest.series
    assert [r.revision for r in pythia.revisions][::3] == ["step0", "step143000"]
    assert all(r.tokens == r.step * 2_097_152 and r.repo == "EleutherAI/pythia-70m" for r in pythia.revisions)
    assert [(r.revision, r.tokens, r.step) for r in olmo.revisions] == [("main", None, None)]
    assert all(r.tokens is None and r.step for r in smol.revisions)
    with_config = build_manifest(["smollm2-360m"], 2, branches, tokens_per_step=lambda repo, rev: 10)
    assert [r.tokens for r in with_config.series[0].revisions] == [1_600_000, 12_800_000]
    with pytest.raises(ValueError, match="unknown series"):
        build_manifest(["gpt5"], 2, branches)


def test_nanotron_tokens_per_step() -> None:
    cfg = {"tokens": {"sequence_length": 2048, "micro_batch_size": 8, "batch_accumulation_per_replica": 1},
           "parallelism": {"dp": 64}}
    assert nanotron_tokens_per_step(cfg) == 1_048_576
    assert nanotron_tokens_per_step({"tokens": {}}) is None


def test_manifest_round_trip_and_relative_paths(tmp_path) -> None:
    data = {"series": [{"name": "pythia-70m", "revisions": [
        {"revision": "step1000", "repo": "EleutherAI/pythia-70m", "tokens": 2097152000},
        {"revision": "local-step0", "path": "models/s0", "tokens": 0}]}]}
    (tmp_path / "m.json").write_text(json.dumps(data))
    m = load_manifest(tmp_path / "m.json")
    assert isinstance(m, Manifest)
    a, b = m.series[0].revisions
    assert (a.step, a.tokens, a.path) == (1000, 2097152000, None)
    assert b.path == str(tmp_path / "models/s0") and b.step == 0 and b.repo is None
    write_manifest(m, tmp_path / "again.json")
    assert load_manifest(tmp_path / "again.json") == m
    assert json.loads((tmp_path / "again.json").read_text())["series"][0]["revisions"][0] == data["series"][0]["revisions"][0]


@pytest.mark.parametrize(("data", "message"), [
    ([], "single key 'series'"),
    ({"series": []}, "non-empty list"),
    ({"series": [{"revisions": []}]}, r"series\[0\]: missing field 'name'"),
    ({"series": [{"name": "a", "revisions": [], "x": 1}]}, r"series\[0\]: unknown field 'x'"),
    ({"series": [{"name": "a", "revisions": []}]}, r"series\[0\].revisions must be a non-empty list"),
    ({"series": [{"name": "a", "revisions": [{"repo": "a/b"}]}]}, r"revisions\[0\]: missing field 'revision'"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r"}]}]}, "exactly one of 'repo' or 'path'"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b", "path": "/x"}]}]}, "exactly one"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "nope"}]}]}, r"revisions\[0\].repo"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b", "tokens": -1}]}]},
     r"revisions\[0\].tokens must be a non-negative integer"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b", "tokens": "9"}]}]}, "tokens"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b", "step": 1.5}]}]}, "step"),
    ({"series": [{"name": "a", "revisions": [{"revision": "", "repo": "a/b"}]}]}, r"revision must be a non-empty"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b"}] * 2}]}, "'r' appears twice"),
    ({"series": [{"name": "a", "revisions": [{"revision": "r", "repo": "a/b"}]}] * 2}, "'a' appears twice"),
])
def test_manifest_errors_name_the_field(data, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(data)


def test_load_manifest_file_errors(tmp_path) -> None:
    with pytest.raises(ManifestError, match="does not exist"):
        load_manifest(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(tmp_path / "bad.json")
